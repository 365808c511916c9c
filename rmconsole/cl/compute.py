"""What a run computes: FLOPs measured on the run's own model, counted on the host, and the bytes
its memory and method state hold (issue 40; Prabhu et al., CVPR 2023; Ghunaim et al., CVPR 2023).

How the FLOPs are counted. The training and evaluation code never measures anything itself and
never waits for the device: where a pass over a batch happens, its kind and input shape are
counted in a `Ledger` on the host (a dict increment: `ledger_of(method).add("train", x.shape)`).
When the figures are asked for (an anytime evaluation, a task's end), each distinct (kind, shape)
the ledger holds is measured ONCE with `torch.utils.flop_counter.FlopCounterMode` on a copy of
the run's model with its parameters and buffers on the meta device (no arithmetic runs, nothing
of the real model is touched), cached by the model's architecture and the shape, and multiplied
by its count. A method whose cost grows with its memory (CLIB scores its whole memory, MIR its
candidates, GDumb trains epochs over it) runs passes of new shapes, and each new shape is
measured when it first appears.

Kinds:
    train    one optimiser step's forward + backward at that input shape (the gradients autograd
             computes: of every parameter that requires one; not of the input). A method's
             look-ahead step (MIR) is also counted as one.
    forward  a forward pass without gradients while learning (CLIB's importance, MIR's candidate
             scoring, RM's uncertainty votes)
    eval     a forward pass of an evaluation (test and validation)

What FlopCounterMode counts: matrix multiplications and convolutions (2 FLOPs per multiply-add)
and their backward; not element-wise work (activations, batch norm, the loss, the optimiser's
update, augmentation). What is not counted at all: passes a method makes outside these hooks
(a distillation teacher's forward inside its loss, a Fisher estimate at a task's end), unless the
method counts them; they are said where a method has them (docs/compute.md).

Memory bytes: the replay memory's samples times the bytes of one stored sample (its uint8 image,
C x H x W, and an int64 label), plus the state a method keeps across steps, declared by the method
as `kept_state` (attribute names, dotted for a nested one: EWC's Fisher and anchor, CLIB's
per-slot importance and losses, iCaRL's class means, BiC's old model), summed over their tensors.

Pure science: torch only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

KINDS = ("train", "forward", "eval")
LABEL_BYTES = 8  # an int64 label per stored sample

Shape = tuple[int, ...]
_MEASURED: dict[tuple[Any, str, Shape], int] = {}  # (architecture, kind, shape) -> FLOPs
_MEASURED_LIMIT = 20_000


def architecture(model: nn.Module) -> tuple[Any, ...]:
    """What a FLOP count depends on besides the input shape: the module tree, each parameter's
    shape and whether it takes a gradient (a frozen head has no weight gradient)."""
    return (
        type(model).__qualname__,
        tuple((n, tuple(p.shape), p.requires_grad) for n, p in model.named_parameters()),
        tuple((n, type(m).__qualname__) for n, m in model.named_modules()),
    )


ESTIMATED: set[str] = set()  # models whose training pass was estimated as 3 forward passes


def _plain(model: nn.Module) -> nn.Module:
    return getattr(model, "_orig_mod", model)  # a compiled wrapper: its module


def measure(model: nn.Module, kind: str, shape: Sequence[int], arch: tuple[Any, ...] | None = None) -> int:
    """FLOPs of one `kind` pass of `model` on a batch of `shape` (cached by architecture, kind and
    shape). The pass runs on meta tensors standing in for the model's parameters and buffers:
    the real model's weights, statistics, gradients and hooks are left as they were."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: allowed: {', '.join(KINDS)}")
    shape = tuple(int(d) for d in shape)
    key = (architecture(model) if arch is None else arch, kind, shape)  # (`arch`: the caller's, computed once)
    if key in _MEASURED:
        return _MEASURED[key]
    model = _plain(model)
    compiled = any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())
    count = _count
    if compiled:  # a compiled backbone (compile=true) runs eagerly here, so the counter sees every op
        import torch._dynamo  # (already imported by the compile; never at start-up otherwise)

        count = torch._dynamo.disable(_count)
    try:
        flops = count(model, kind, shape)
    except (AssertionError, RuntimeError, NotImplementedError):
        if kind != "train":
            raise
        # the counter's module tracker cannot follow this model's backward (DualPrompt's prefixes
        # trip its grad hooks): a training pass is counted as 3 forward passes, the usual estimate
        # (docs/compute.md). Measuring must never fail the run it measures.
        ESTIMATED.add(key[0] if isinstance(key[0], str) else type(model).__name__)
        flops = 3 * count(model, "forward", shape)
    if len(_MEASURED) >= _MEASURED_LIMIT:
        _MEASURED.clear()
    _MEASURED[key] = flops
    return flops


def _count(model: nn.Module, kind: str, shape: Shape) -> int:
    # (imported when first measured, not at start-up. The meta kernels of addmm, batch norm and the
    # loss are Python and import torch._dynamo on first use, ~1 s of CPU; a run has imported it by
    # then anyway: ER task-free and RM/ER task-protocol runs on main do, measured 2026-11-27)
    from torch.utils.flop_counter import FlopCounterMode

    params = {  # (only a training pass needs gradients: a no-grad pass with leaves that want them
        # trips the counter's module tracker when a module hands a parameter to a submodule)
        n: torch.empty_like(p, device="meta").requires_grad_(p.requires_grad and kind == "train")
        for n, p in model.named_parameters()
    }
    buffers = {n: torch.empty_like(b, device="meta") for n, b in model.named_buffers()}
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    x = torch.zeros(shape, dtype=dtype, device="meta")
    was_training = model.training
    counter = FlopCounterMode(display=False)
    try:
        model.train(kind == "train")
        with counter:
            if kind == "train":
                out = functional_call(model, {**params, **buffers}, (x,))
                wanted = [p for p in params.values() if p.requires_grad]
                if wanted:
                    torch.autograd.grad(out.float().sum(), wanted, allow_unused=True)
            else:
                with torch.no_grad():
                    functional_call(model, {**params, **buffers}, (x,))
    finally:
        model.train(was_training)
    return int(counter.get_total_flops())


class Ledger:
    """How many passes of each kind and input shape a run made (host counts; checkpointed)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, Shape], int] = {}
        self.tab: list[tuple[tuple[str, Shape], int]] | None = None  # the passes of one iteration (Credit)

    def add(self, kind: str, shape: Iterable[int], n: int = 1) -> None:
        key = (kind, tuple(int(d) for d in shape))
        self.counts[key] = self.counts.get(key, 0) + n
        if self.tab is not None:
            self.tab.append((key, n))

    def samples(self, kind: str) -> int:
        """Images passed in passes of `kind` (the batch dimension summed)."""
        return sum(count * shape[0] for (k, shape), count in self.counts.items() if k == kind and shape)

    def flops(self, model: nn.Module, kinds: Iterable[str]) -> int:
        """Total FLOPs of the passes of `kinds`: each distinct shape measured once on `model`."""
        wanted, arch = set(kinds), architecture(model)
        return sum(count * measure(model, k, shape, arch) for (k, shape), count in self.counts.items() if k in wanted)

    def state(self) -> list[list[Any]]:
        return [[k, list(shape), count] for (k, shape), count in self.counts.items()]

    def load(self, state: Sequence[Sequence[Any]] | None) -> None:
        self.counts = {}
        for kind, shape, count in state or ():
            self.add(str(kind), shape, int(count))


def ledger_of(method: Any) -> Ledger:
    """The method's ledger (made on first use: a method needs no set-up for it)."""
    ledger = getattr(method, "compute_ledger", None)
    if not isinstance(ledger, Ledger):
        ledger = Ledger()
        method.compute_ledger = ledger
    return ledger


TRAINING = ("train", "forward")  # what learning costs: steps and the forward passes it makes


def tensor_bytes(value: Any, seen: set[int] | None = None) -> int:
    """Bytes of the tensors in `value`: a tensor, a module (parameters and buffers), or lists,
    tuples and dicts of them; each storage once."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        key = value.untyped_storage().data_ptr() if value.device.type != "meta" else id(value)
        if key in seen:
            return 0
        seen.add(key)
        return value.numel() * value.element_size()
    if isinstance(value, nn.Module):
        return sum(tensor_bytes(t, seen) for t in [*value.parameters(), *value.buffers()])
    if isinstance(value, Mapping):
        return sum(tensor_bytes(v, seen) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in value)
    return 0


def _attribute(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def state_bytes(method: Any) -> int:
    """Bytes of the state the method declares it keeps (`kept_state`: attribute names)."""
    seen: set[int] = set()
    return sum(tensor_bytes(_attribute(method, path), seen) for path in getattr(type(method), "kept_state", ()))


def sample_bytes(image_shape: Sequence[int]) -> int:
    """Bytes of one stored sample: its uint8 image and its int64 label."""
    n = 1
    for d in image_shape:
        n *= int(d)
    return n + LABEL_BYTES


def summary(method: Any, samples_trained: int, seconds: float, devices: int = 1) -> dict[str, Any]:
    """The run's compute so far, as the metric catalogue reads it (stored with each task's result):
    training and evaluation TFLOP, GFLOP per trained sample (per sample the learner received)
    and per evaluated sample, memory bytes, device-seconds. With several ranks (`devices`), each
    counts its own shard of every batch: rank 0's count times the ranks (shards differ by at most
    a sample)."""
    ledger = ledger_of(method)
    train = ledger.flops(method.model, TRAINING) * devices
    evaluation = ledger.flops(method.model, ("eval",)) * devices
    evaluated = ledger.samples("eval") * devices
    kept = state_bytes(method)
    memory = len(method.memory) * sample_bytes(method.setup.data.image_shape)
    return {
        "train_tflop": train / 1e12,
        "eval_tflop": evaluation / 1e12,
        "gflop_per_train_sample": train / 1e9 / samples_trained if samples_trained else None,
        "gflop_per_eval_sample": evaluation / 1e9 / evaluated if evaluated else None,
        "memory_bytes": memory + kept,
        "state_bytes": kept,
        "device_seconds": round(seconds * devices, 3),
    }


class Credit:
    """A compute budget per streamed sample (`train_gflop_per_sample`), kept on the host as a FLOP
    credit: every streamed sample adds the budget; a method takes a training iteration only while
    the credit covers what its last iteration cost, and each iteration is charged what the ledger
    charges for it (every train and forward pass it added, each shape measured on the run's model:
    `measure`, cached, so a new shape is measured when it appears). The iteration's cost is known
    after it ran (a growing batch, the passes inside a method's loss), so the credit may go below
    zero by at most one iteration's cost: the FLOPs a run spends are at most the budget times its
    samples plus one iteration. Host numbers only: nothing waits for the device."""

    TOLERANCE = 1e-9  # relative: a balance equal to a step's cost but for rounding covers it

    def __init__(self, gflop_per_sample: float) -> None:
        self.per_sample = float(gflop_per_sample) * 1e9  # FLOPs earned per streamed sample
        self.balance = 0.0  # FLOPs earned and not yet spent (below zero: an iteration overdrawn)
        self.expected = 0.0  # FLOPs of the last iteration: what the next one is expected to cost

    def earn(self, samples: int = 1) -> None:
        self.balance += self.per_sample * samples

    def covers(self) -> bool:
        return self.balance > 0 and self.balance >= self.expected * (1 - self.TOLERANCE)

    def spend(self, ledger: Ledger, model: nn.Module, iteration: Callable[[], None]) -> int:
        """Run `iteration` and charge what it added to `ledger`'s training passes; its FLOPs."""
        ledger.tab = []
        try:
            iteration()
        finally:
            tab, ledger.tab = ledger.tab, None
        arch = architecture(model) if tab else None
        flops = sum(n * measure(model, kind, shape, arch) for (kind, shape), n in tab if kind in TRAINING)
        self.balance -= flops
        if flops > 0:
            self.expected = float(flops)
        return flops

    def run(self, ledger: Ledger, model: nn.Module, iteration: Callable[[], None]) -> int:
        """Iterations while the credit covers them; how many ran. One that costs nothing (a batch
        too small to train on) ends them: the next sample may bring what it lacked."""
        taken = 0
        while self.covers():
            taken += 1
            if self.spend(ledger, model, iteration) == 0:
                break
        return taken

    def state(self) -> dict[str, float]:
        return {"balance": self.balance, "expected": self.expected}

    def load(self, state: Mapping[str, float]) -> None:
        self.balance, self.expected = float(state["balance"]), float(state["expected"])


def credit_of(settings: Any) -> Credit | None:
    """The run's FLOP credit, or None without `train_gflop_per_sample` (its `online_iter` then)."""
    budget = getattr(settings, "train_gflop_per_sample", None)
    return None if budget is None else Credit(budget)


__all__ = [
    "KINDS",
    "TRAINING",
    "Credit",
    "Ledger",
    "architecture",
    "credit_of",
    "ledger_of",
    "measure",
    "sample_bytes",
    "state_bytes",
    "summary",
    "tensor_bytes",
]
