"""Every CUDA-only call the package makes, driven on the CPU through a strict stand-in.

The H100 found what no CPU test reached: `--runs-per-gpu N` crashed at start, because the
worker's index-less `cuda` device went to `torch.cuda.set_per_process_memory_fraction`, which
refuses it. The stand-in (tests/support/cuda_standin.py) checks arguments with torch's own
`_get_device_index`, so these tests fail on that bug and on its class (an index-less device
where torch needs an index, an index past the visible devices, an RNG state of the wrong shape).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from support.cuda_standin import COVERED, NotEmulated, StrictCuda, install, redirect_to_cpu

from rmconsole.cl import accel

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> StrictCuda:
    monkeypatch.setattr(accel, "_memory_share", 1.0)  # set_memory_share is process-wide
    return install(monkeypatch.setattr, count=2)


def test_the_standin_refuses_what_torch_refuses(cuda: StrictCuda) -> None:
    with pytest.raises(ValueError, match="specified index"):
        torch.cuda.set_per_process_memory_fraction(0.5, torch.device("cuda"))
    with pytest.raises(ValueError, match="Expected a cuda device"):
        torch.cuda.set_per_process_memory_fraction(0.5, torch.device("cpu"))
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.cuda.set_per_process_memory_fraction(0.5, torch.device("cuda", 2))
    with pytest.raises(TypeError, match="must be `float`"):
        torch.cuda.set_per_process_memory_fraction(1, 0)
    with pytest.raises(ValueError, match="Allowed range"):
        torch.cuda.set_per_process_memory_fraction(1.5, 0)
    with pytest.raises(ValueError, match="specified index"):
        torch.cuda.set_device("cuda")
    with pytest.raises(RuntimeError, match="wrong size"):
        torch.cuda.set_rng_state_all([torch.zeros(8, dtype=torch.uint8)])
    with pytest.raises(NotEmulated, match="cuda_graphs=false"):
        torch.cuda.CUDAGraph()
    # what torch accepts, the stand-in accepts: `optional` calls read `cuda` as the current device
    torch.cuda.set_device(1)
    assert torch.cuda.get_device_name("cuda") == "Stand-in CUDA device 1"
    torch.cuda.synchronize(torch.device("cuda"))
    torch.cuda.reset_peak_memory_stats("cuda:0")
    assert torch.cuda.max_memory_allocated(torch.device("cuda")) == 0


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda"), 1])
def test_memory_share_caps_the_allocator_of_the_workers_device(cuda: StrictCuda, device: object) -> None:
    """What `--runs-per-gpu 4` does at a worker's start (runner/worker.py, benchmarks/cifar_run.py):
    an index-less `cuda` is the current device's share, as torch reads `cuda` elsewhere."""
    torch.cuda.set_device(1)
    accel.set_memory_share(0.25, device)  # type: ignore[arg-type]
    assert cuda.memory_fraction == {1: 0.25}
    assert accel.memory_share() == 0.25
    assert accel.inference_batch((3, 32, 32), "cuda") == 16384 // 4


def test_the_worker_resolves_a_device_the_share_accepts(cuda: StrictCuda) -> None:
    from rmconsole.runner.worker import package_versions, resolve_device

    device = resolve_device("auto")
    assert device.type == "cuda"
    accel.set_memory_share(0.125, device)
    assert cuda.memory_fraction == {0: 0.125}
    assert package_versions()["gpu"] == "Stand-in CUDA device 0"


def test_checkpoint_rng_states_round_trip(cuda: StrictCuda) -> None:
    """cl/loop.py and cl/online.py save `get_rng_state_all()`; cl/resume.py restores it."""
    cuda.rng[1] = torch.arange(16, dtype=torch.uint8)
    saved = torch.cuda.get_rng_state_all()
    assert [s.shape for s in saved] == [torch.Size([16])] * 2
    cuda.rng.clear()
    torch.cuda.set_rng_state_all(saved)
    assert torch.equal(cuda.rng[1], torch.arange(16, dtype=torch.uint8))


def test_a_torchrun_rank_selects_an_indexed_device(cuda: StrictCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    """distributed.init_from_env on a 2-GPU node: LOCAL_RANK 3 takes GPU 3 mod 2."""
    import torch.distributed as dist

    from rmconsole.cl import distributed

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.delenv("RMCONSOLE_DIST_CPU", raising=False)
    monkeypatch.setattr(dist, "init_process_group", lambda **kwargs: None)
    monkeypatch.setattr(dist, "get_world_size", lambda: 1)
    assert distributed.init_from_env() is None
    assert cuda.current == 1 and ("set_device", (1,)) in cuda.calls


def test_a_queue_hands_out_the_standins_gpus(cuda: StrictCuda) -> None:
    from rmconsole.runner.queue import visible_gpus

    assert visible_gpus({}) == ["0", "1"]


def test_redirect_makes_cuda_tensors_on_the_cpu(cuda: StrictCuda) -> None:
    with redirect_to_cpu():
        x = torch.zeros(3, device="cuda")
        y = torch.ones(2).to(torch.device("cuda", 0), non_blocking=True).pin_memory()
        model = torch.nn.Linear(2, 2).to("cuda")
    assert x.device.type == y.device.type == "cpu"
    assert next(model.parameters()).device.type == "cpu"


def test_every_cuda_only_call_in_the_package_is_stood_in() -> None:
    """The audit, kept: a `torch.cuda.X` the stand-in does not cover fails here, so it cannot
    reach a GPU untested. (is_available is covered: the stand-in says yes.)"""
    called: dict[str, set[str]] = {}
    for root in ("rmconsole", "benchmarks"):
        for path in (REPO / root).rglob("*.py"):
            for name in re.findall(r"torch\.cuda\.([A-Za-z_]\w*)", path.read_text()):
                called.setdefault(name, set()).add(str(path.relative_to(REPO)))
    assert "set_per_process_memory_fraction" in called  # the scan sees the call that crashed
    missing = {name: sorted(paths) for name, paths in called.items() if name not in COVERED}
    assert not missing, f"torch.cuda calls without a stand-in (add them to tests/support/cuda_standin.py): {missing}"
