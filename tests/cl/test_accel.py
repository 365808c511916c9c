"""The GPU fast path's switches: what `auto` means on CPU and CUDA, and that the CPU path stays
float32 and correct (bf16 and channels_last also work on CPU when asked for)."""

from __future__ import annotations

import re

import pytest
import torch

from rmconsole.cl import accel
from rmconsole.cl.accel import Accel, inference_batch, train_chunk
from rmconsole.cl.data import load_digits
from rmconsole.cl.loop import run_protocol
from rmconsole.cl.models import build_model
from rmconsole.config import load_config
from rmconsole.config.errors import ConfigError

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU


def _cfg(**overrides):
    return load_config(None, overrides)[1]


def test_auto_is_off_on_cpu() -> None:
    a = Accel.from_config(_cfg(model="resnet18"), CPU)
    assert (a.amp_dtype, a.channels_last, a.compile) == (None, False, False)
    assert a.describe() == "amp=off, channels_last=False, compile=False"


def test_auto_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accel, "bf16_supported", lambda: True)
    a = Accel.from_config(_cfg(model="resnet18"), CUDA)
    # compile's auto is off: measured slower on an H100 (benchmarks/results); CUDA graphs pay instead
    assert (a.amp_dtype, a.channels_last, a.compile) == (torch.bfloat16, True, False)
    mlp = Accel.from_config(_cfg(), CUDA)  # an MLP has no convolutions to speed up
    assert (mlp.amp_dtype, mlp.channels_last, mlp.compile) == (torch.bfloat16, False, False)
    monkeypatch.setattr(accel, "bf16_supported", lambda: False)  # pre-Ampere GPUs: float32
    assert Accel.from_config(_cfg(model="resnet18"), CUDA).amp_dtype is None


def test_explicit_keys_win() -> None:
    a = Accel.from_config(_cfg(model="resnet18", amp="bf16", channels_last=True, compile=True), CPU)
    assert (a.amp_dtype, a.channels_last, a.compile) == (torch.bfloat16, True, True)
    off = Accel.from_config(_cfg(model="resnet18", amp="off", channels_last=False, compile=False), CUDA)
    assert (off.amp_dtype, off.channels_last, off.compile) == (None, False, False)


def test_compile_step_compiles_the_step_not_the_backbone() -> None:
    """compile = "step": the whole default step compiled (graphs.CompiledStep), the backbone left
    alone (compiling it inside a compiled step would be twice), CUDA graphs off (the compiled step
    replaces them); any other word is refused with the allowed values."""
    cfg = _cfg(model="resnet18", compile="step")
    a = Accel.from_config(cfg, CUDA)
    assert (a.compile, a.compile_step) == (False, True) and a.describe().endswith("compile=step")
    assert not Accel.from_config(_cfg(model="resnet18", compile=True), CPU).compile_step
    with pytest.raises(ConfigError, match=re.escape("compile='steps': allowed: auto, true, false, step")):
        _cfg(compile="steps")


def test_autocast_and_memory_format() -> None:
    layer = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with Accel(CPU).autocast():
        assert layer(x).dtype == torch.float32
    with Accel(CPU, amp_dtype=torch.bfloat16).autocast():
        assert layer(x).dtype == torch.bfloat16
    images = torch.randn(2, 3, 8, 8)
    assert Accel(CPU, channels_last=True).prepare(images).is_contiguous(memory_format=torch.channels_last)
    assert Accel(CPU).prepare(images).is_contiguous()


def test_channels_last_model_computes_the_same() -> None:
    torch.manual_seed(0)
    model = build_model("resnet32", (3, 16, 16), 10).eval()
    x = torch.randn(4, 3, 16, 16)
    with torch.inference_mode():
        expected = model(x)
        fast = Accel(CPU, channels_last=True)
        got = fast.prepare_model(model)(fast.prepare(x))
    assert torch.allclose(got, expected, atol=1e-4)


def test_batch_sizes_scale_with_the_image() -> None:
    assert inference_batch((1, 28, 28), CPU) == 16384 and inference_batch((3, 32, 32), CUDA) == 16384
    assert inference_batch((3, 32, 32), CPU, 4096) == 4096  # the spine's evaluation batch, unchanged
    assert inference_batch((3, 224, 224), CUDA) == 16384 * 3 * 32 * 32 // (3 * 224 * 224)  # 334
    assert inference_batch((3, 224, 224), CPU) == 16384 * 3 * 32 * 32 // 8 // (3 * 224 * 224)  # 41
    assert train_chunk((3, 32, 32), 16) == 8192 and train_chunk((3, 224, 224), 256) == 256


def test_bf16_autocast_run_on_cpu() -> None:
    torch.set_num_threads(1)
    outcomes = run_protocol(_cfg(epochs=2, amp="bf16"), load_digits(), CPU)
    assert len(outcomes) == 5 and outcomes[-1].accuracy > 20


def test_default_cpu_run_is_unchanged_float32() -> None:
    """amp/channels_last/compile auto on CPU: the same numbers as the keys switched off."""
    torch.set_num_threads(1)
    auto = run_protocol(_cfg(epochs=1), load_digits(), CPU)
    off = run_protocol(_cfg(epochs=1, amp="off", channels_last=False, compile=False), load_digits(), CPU)
    assert [o.accuracy for o in auto] == [o.accuracy for o in off]


@pytest.mark.slow
def test_compile_on_cpu_runs() -> None:
    """torch.compile (inductor, needs a C compiler) on the digits MLP: same protocol, finite results."""
    torch.set_num_threads(1)
    outcomes = run_protocol(_cfg(epochs=1, compile=True), load_digits(), CPU)
    assert len(outcomes) == 5 and all(0 <= o.accuracy <= 100 for o in outcomes)
