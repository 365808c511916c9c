"""A strict stand-in for the `torch.cuda` calls rmconsole makes, so CUDA-only code paths run on a CPU.

Each stand-in checks its arguments as torch does before it would reach the driver: device
arguments go through torch's own `torch.cuda._utils._get_device_index` (no GPU needed) with the
same `optional` flag the real function passes, so an index-less `torch.device("cuda")` is refused
where torch refuses it ("Expected a torch.device with a specified index or an integer"), and an
index past `device_count()` is refused as the driver refuses it ("invalid device ordinal").
`COVERED` names every `torch.cuda` attribute the stand-in replaces: tests/cl/test_cuda_standin.py
fails when the package calls one that is not here, so a new CUDA-only call cannot go untested.

`redirect_to_cpu()` goes further, for a whole worker: tensors asked for on `cuda` are made on the
CPU (a TorchFunctionMode rewriting device arguments; pinning is a no-op), so a run whose device
resolves to CUDA trains on the CPU while every CUDA-only call meets the stand-in. CUDA graphs are
not emulated (a capture cannot be replayed without a GPU): `CUDAGraph`, `graph`, `stream` refuse,
and runs through the stand-in set `cuda_graphs=false`; `gpu`-marked tests cover them on a GPU.

In a subprocess: put this folder on PYTHONPATH and set RMCONSOLE_TEST_CUDA_STANDIN=N (N devices);
its `sitecustomize.py` installs the stand-in and the redirect before rmconsole imports.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

ENV = "RMCONSOLE_TEST_CUDA_STANDIN"
RNG_STATE_BYTES = 16  # a CUDA Philox generator's state: seed (8 bytes) + offset (8 bytes)
TOTAL_MEMORY = 80 * 2**30

COVERED = frozenset(
    {
        "is_available",
        "device_count",
        "current_device",
        "set_device",
        "get_device_name",
        "get_device_properties",
        "is_bf16_supported",
        "get_rng_state_all",
        "set_rng_state_all",
        "set_per_process_memory_fraction",
        "synchronize",
        "max_memory_allocated",
        "max_memory_reserved",
        "reset_peak_memory_stats",
        # refused, not emulated (see the module docstring)
        "CUDAGraph",
        "graph",
        "Stream",
        "current_stream",
        "stream",
    }
)


class NotEmulated(RuntimeError):
    """A CUDA call the stand-in cannot stand in for: the test must avoid it (say cuda_graphs=false)."""


@dataclass
class Properties:
    name: str
    total_memory: int
    major: int = 9
    minor: int = 0


@dataclass
class StrictCuda:
    """`count` fake devices; records every call it accepted (`calls`) and the state it keeps."""

    count: int = 1
    bf16: bool = False
    current: int = 0
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    memory_fraction: dict[int, float] = field(default_factory=dict)
    rng: dict[int, torch.Tensor] = field(default_factory=dict)

    def _index(self, device: Any, optional: bool) -> int:
        from torch.cuda._utils import _get_device_index

        index = _get_device_index(device, optional=optional)  # torch's own check, current_device() stood in
        if not 0 <= index < self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal ({index}; {self.count} device(s) visible)")
        return index

    def _log(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    # -- the calls ---------------------------------------------------------------------------------
    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count

    def current_device(self) -> int:
        return self.current

    def set_device(self, device: Any) -> None:
        self._log("set_device", device)
        self.current = self._index(device, optional=False)

    def get_device_properties(self, device: Any = None) -> Properties:
        index = self._index(device, optional=True)
        return Properties(name=f"Stand-in CUDA device {index}", total_memory=TOTAL_MEMORY)

    def get_device_name(self, device: Any = None) -> str:
        return self.get_device_properties(device).name

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return self.bf16

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.rng.get(i, torch.zeros(RNG_STATE_BYTES, dtype=torch.uint8)).clone() for i in range(self.count)]

    def set_rng_state_all(self, new_states: Iterable[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.device.type != "cpu":
                raise TypeError(f"RNG state must be a torch.ByteTensor on the CPU, got {type(state).__name__}")
            if state.numel() != RNG_STATE_BYTES:
                raise RuntimeError(f"RNG state is wrong size: {state.numel()} bytes, expected {RNG_STATE_BYTES}")
            self._index(i, optional=False)
            self.rng[i] = state.clone()

    def set_per_process_memory_fraction(self, fraction: Any, device: Any = None) -> None:
        self._log("set_per_process_memory_fraction", fraction, device)
        index = self._index(self.current if device is None else device, optional=False)
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if fraction < 0 or fraction > 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        self.memory_fraction[index] = fraction

    def synchronize(self, device: Any = None) -> None:
        self._index(device, optional=True)

    def max_memory_allocated(self, device: Any = None) -> int:
        self._index(device, optional=True)
        return 0

    def max_memory_reserved(self, device: Any = None) -> int:
        self._index(device, optional=True)
        return 0

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self._index(device, optional=True)

    def refuse(self, name: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise NotEmulated(f"torch.cuda.{name}: CUDA graphs and streams are not emulated (set cuda_graphs=false)")

        return refused

    def replacements(self) -> dict[str, Any]:
        refused = {"CUDAGraph", "graph", "Stream", "current_stream", "stream"}
        out = {name: (self.refuse(name) if name in refused else getattr(self, name)) for name in COVERED}
        assert set(out) == COVERED
        return out


def install(setattr_: Callable[[Any, str, Any], None], count: int = 1, bf16: bool = False) -> StrictCuda:
    """Replace the covered `torch.cuda` attributes (`setattr_`: pytest's monkeypatch.setattr, or
    plain setattr in a subprocess) and return the stand-in."""
    cuda = StrictCuda(count=count, bf16=bf16)
    for name, value in cuda.replacements().items():
        setattr_(torch.cuda, name, value)
    return cuda


def _cpu(device: Any) -> Any:
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("cpu")
    if isinstance(device, str) and device.split(":")[0] == "cuda":
        return "cpu"
    if isinstance(device, int) and not isinstance(device, bool):
        return "cpu"  # `tensor.to(0)` / `device=0` means CUDA device 0
    return device


class redirect_to_cpu(TorchFunctionMode):  # a context manager, lower-case as torch.s own modes
    """Tensors asked for on a CUDA device are made on the CPU; `pin_memory()` returns its tensor."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.pin_memory:
            return args[0]
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        if func in (torch.Tensor.to, torch.Tensor.cuda) and len(args) > 1:
            args = (args[0], _cpu(args[1]), *args[2:])
        if func is torch.Tensor.cuda:
            return args[0].to("cpu", **{k: v for k, v in kwargs.items() if k == "non_blocking"})
        return func(*args, **kwargs)


def install_from_env() -> None:
    """What the `sitecustomize.py` beside this module calls in a subprocess."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return
    install(setattr, count=int(raw))
    mode = redirect_to_cpu()
    mode.__enter__()  # for the whole process: a worker's training thread is its main thread
