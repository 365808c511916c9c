"""Installs the strict CUDA stand-in (tests/support/cuda_standin.py) in a subprocess whose
environment sets RMCONSOLE_TEST_CUDA_STANDIN; does nothing (and imports nothing) otherwise."""

import os

if os.environ.get("RMCONSOLE_TEST_CUDA_STANDIN", "").strip():
    import importlib.util
    from pathlib import Path

    _path = Path(__file__).resolve().parents[1] / "cuda_standin.py"
    _spec = importlib.util.spec_from_file_location("rmconsole_cuda_standin", _path)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    import sys

    sys.modules[_spec.name] = _module  # (dataclasses look their module up there)
    _spec.loader.exec_module(_module)
    _module.install_from_env()
