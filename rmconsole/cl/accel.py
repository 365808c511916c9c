"""The GPU fast path: bf16 autocast, channels_last, torch.compile, and inference batch sizes.

Each knob is a config key with an `auto` default that is on where it pays and off where it
does not (or cannot be trusted): on a CPU run everything is off, so the CPU path computes in
float32 exactly as before. Anything that fails at run time falls back to the plain path with
one line in the log instead of failing the run (torch.compile with `suppress_errors`).
"""

from __future__ import annotations

import contextlib
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from .settings import RunSettings

# uint8 pixels (C*H*W per image) a batched inference call may hold at once: 16384 CIFAR images,
# about 330 ImageNet ones (x the model's activations: what an 80 GB GPU or a laptop can hold)
INFERENCE_PIXELS = 16384 * 3 * 32 * 32
TRAIN_CHUNK_PIXELS = 8192 * 3 * 32 * 32  # images augmented in one batched call during training
M = TypeVar("M", bound=nn.Module)  # a model, given back as the same object

# The share of its device's memory this process may use: 1 alone on a GPU, 1/N when N runs share
# it (`--runs-per-gpu N`). The inference budget above was set for a whole 80 GB GPU (measured: RM's
# CIFAR scoring at 16384 images reserves about 15.8 GiB), so forward passes scale with the share:
# 8 runs on one H100 with whole-GPU batches ran 4 of them out of memory. Only the forward passes
# shrink: what a batch draws at random (RM's perturbed views, augmentation chunks) is drawn as for
# a run alone on its GPU, so a run's results do not depend on how many share its GPU.
_memory_share = 1.0


def set_memory_share(share: float, device: torch.device | str | None = None) -> None:
    """Give this process `share` (0 < share <= 1) of its device: inference forward passes scale
    by it (`inference_batch`), and on a CUDA device the caching allocator is capped at that
    fraction (`torch.cuda.set_per_process_memory_fraction`), so one run cannot starve its
    neighbours."""
    global _memory_share
    if not 0 < share <= 1:
        raise ValueError(f"memory share {share}: must be in (0, 1]")
    _memory_share = float(share)
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(_memory_share, cuda_index(device))


def cuda_index(device: torch.device | str | int) -> int:
    """The index of a CUDA device; `cuda` alone is the current one (the GPU its slot's
    CUDA_VISIBLE_DEVICES left first). torch.cuda's calls whose device is optional read `cuda` so
    themselves; the others (`set_per_process_memory_fraction`, `set_device`) refuse it."""
    if isinstance(device, int):
        return device
    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else index


def memory_share() -> float:
    return _memory_share


def bf16_supported() -> bool:
    """bf16 tensor cores (Ampere and newer); False where there is no CUDA at all."""
    try:
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    except (RuntimeError, AssertionError):
        return False


def _auto(value: Any) -> Any:
    return None if value in (None, "auto") else value


@dataclass
class Accel:
    """How this run computes: set once per run from its config and device."""

    device: torch.device
    amp_dtype: torch.dtype | None = None  # autocast dtype, None = float32
    channels_last: bool = False
    compile: bool = False
    compile_step: bool = False  # `compile = "step"`: the default training step compiled whole (train.Stepper)

    @classmethod
    def from_config(cls, cfg: RunSettings, device: torch.device) -> Accel:
        cuda = device.type == "cuda"
        conv = cfg.model != "mlp400"
        amp = cfg.amp
        if amp == "auto":
            amp = "bf16" if cuda and bf16_supported() else "off"
        channels_last = _auto(cfg.channels_last)
        compile_ = _auto(cfg.compile)
        return cls(
            device=device,
            amp_dtype=torch.bfloat16 if amp == "bf16" else None,
            channels_last=(cuda and conv) if channels_last is None else bool(channels_last) and conv,
            # auto = off: measured on an H100 (torch 2.11), compiling the backbone cost minutes per run
            # and hit dynamo's recompile limit on RM's mixed batch sizes; CUDA graphs pay instead
            compile=compile_ is True,
            # off until a GPU measurement shows a gain over the CUDA-graphed step (docs/performance.md)
            compile_step=compile_ == "step",
        )

    def describe(self) -> str:
        return (
            f"amp={'bf16' if self.amp_dtype is not None else 'off'}, channels_last={self.channels_last}, "
            f"compile={'step' if self.compile_step else self.compile}"
        )

    def autocast(self, graph_safe: bool = False) -> AbstractContextManager[Any]:
        """Mixed precision around forward passes (loss and backward stay float32 where it matters).
        `graph_safe`: no cast cache, as a CUDA graph capture needs."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype, cache_enabled=False if graph_safe else None)

    def prepare(self, x: Tensor) -> Tensor:
        """A normalised image batch in the memory format the model runs fastest on."""
        if self.channels_last and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def prepare_model(self, model: M) -> M:
        """channels_last weights; the feature extractor compiled in place (state_dict keys, the
        `features`/`fc` split and checkpoints stay as they are)."""
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        features = getattr(model, "features", None)
        if self.compile and isinstance(features, nn.Module):
            from torch import _dynamo

            _dynamo.config.suppress_errors = True  # a graph that fails to compile runs eagerly
            try:
                features.compile(dynamic=None)
            except Exception as err:  # noqa: BLE001 - the eager model is always a valid fallback
                print(
                    f"torch.compile unavailable ({type(err).__name__}: {err}); running eagerly",
                    file=sys.stderr,
                    flush=True,
                )
                self.compile = False
        return model


def pixels(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return max(n, 1)


def inference_batch(
    shape: tuple[int, ...], device: torch.device | str = "cuda", cap: int = 16384, share: float | None = None
) -> int:
    """Images per batched inference call (evaluation, scoring, features) for images of `shape`.

    Up to CIFAR's size this is `cap` (the spine's batch sizes, unchanged); bigger images get
    proportionally fewer, and on a CPU eight times fewer again: a bigger batch does not speed a
    CPU up, and 4096 64x64 ResNet activations alone would need about 15 GB of RAM. All of it
    scales with the process's memory share (`share`, default `memory_share()`): a run given 1/8
    of a GPU scores CIFAR in batches of 2048, not 16384.
    """
    px = pixels(shape)
    budget = INFERENCE_PIXELS if (torch.device(device).type != "cpu" or px <= 3 * 32 * 32) else INFERENCE_PIXELS // 8
    budget = int(budget * (memory_share() if share is None else share))
    return max(1, min(cap, budget // px))


def train_chunk(shape: tuple[int, ...], batch: int, cap: int = 8192) -> int:
    """Images per batched augmentation call during training (at least one batch). Not scaled by
    the memory share: the chunk decides the augmentation's random draws, and 8192 augmented
    CIFAR images are a few hundred MB, not the scoring pass's gigabytes."""
    return max(batch, min(cap, TRAIN_CHUNK_PIXELS // pixels(shape)))
