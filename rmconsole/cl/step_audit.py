"""What a training step asks of the host: host synchronisations and operator counts, measured
on any device (CPU included), for tests and benchmarks. Torch only.

A host synchronisation (issue 43's definition) is any of the operators `_local_scalar_dense`,
`is_nonzero`, `nonzero`, `unique*`, `masked_select`, `repeat_interleave` without an output
size, indexing (read or write) with a boolean mask, or `Tensor.item / tolist / numpy / cpu /
__bool__ / __int__ / __float__ / __index__`, applied to a tensor that lives on the training
device. On a GPU that is where the host waits for the device; on CPU nothing waits, so the
audit decides what "on the training device" means itself: the tensors it is told are the
device's (`mark`: the model, the optimiser's state, the dataset, the method's tensors), and
every tensor an operator computes from one of those. A tensor the host makes from its own
values (`torch.tensor(list)`, a draw of a CPU generator) is the host's until it meets device
data. Counted once per call: `bool(t)` is one sync, not also its `is_nonzero`.

    audit = StepAudit()
    audit.mark_method(method)                       # what the method holds is on the device
    with audit:
        ...one or more updates...
    audit.syncs            # Counter: sync name -> calls (with the caller's file:line in `where`)
    audit.dispatch_ops     # Counter: every operator that reached the dispatcher
    audit.kernel_ops()     # the ones that may launch a kernel (views and metadata left out)
    audit.outside_ops      # of those, the ones on device data outside `graphable()`: launches
    audit.host_ops         # ... and those on host tensors alone (a draw's arithmetic): no launch

Launches are told from the host's own work the same way: an operator launches a kernel on a GPU
when it takes device data or makes a tensor on the training device, and a host tensor (more than
a scalar) beside device data is copied to the device first, one more launch. On a CPU run the
dispatcher sees "cpu" for every tensor, so a call that names the training device (`device=`,
`.to(device)`) makes the device's tensor, and the copy a GPU makes there is counted even where
the CPU skips it (`.to("cpu")` returns its own tensor).

`Capturable` is the stricter mode a CUDA graph needs, checked on CPU: inside it, a sync, a
copy between host and device (a host tensor meeting a device one, `.to`/`.cpu()` of device
data) or an operator whose shapes differ from the previous update's raises `NotCapturable`.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = [
    "NO_KERNEL",
    "SYNC_METHODS",
    "SYNC_OPS",
    "Capturable",
    "DeclaredSync",
    "NotCapturable",
    "StepAudit",
    "graphable",
]

# operators that wait for the device's result whatever their inputs hold
SYNC_OPS = frozenset(
    [
        "_local_scalar_dense",
        "is_nonzero",
        "nonzero",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "unique_dim_consecutive",
        "masked_select",
    ]
)
# Tensor methods that hand device data to the host
SYNC_METHODS = frozenset(["item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__"])
_INDEXING = frozenset(["index", "index_put", "index_put_", "_index_put_impl_"])

# operators that launch no kernel: views, allocations, metadata
NO_KERNEL = frozenset(
    [
        "detach",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "view",
        "_unsafe_view",
        "reshape",
        "_reshape_alias",
        "slice",
        "select",
        "expand",
        "t",
        "transpose",
        "as_strided",
        "alias",
        "unsqueeze",
        "squeeze",
        "permute",
        "lift_fresh",
        "_to_copy_noop",
        "resolve_conj",
        "resolve_neg",
        "unbind",
        "split",
        "split_with_sizes",
        "chunk",
        "narrow",
        "flatten",
        "unflatten",
        "result_type",
        "size",
        "stride",
        "numel",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "is_same_size",
        "_has_compatible_shallow_copy_type",
        "set_",
        "record_stream",
    ]
)


@dataclass(frozen=True)
class DeclaredSync:
    """A host sync a method's published algorithm needs inside its step (a method lists them
    in its class variable `declared_syncs`; docs/performance.md shows them; the sync test
    allows exactly these): where the audit reports it ("Tensor.cpu at clib.py", no line), the
    most it may happen per update for a method as configured, and why."""

    where: str
    per_update: Callable[[Any], float]
    reason: str


class NotCapturable(RuntimeError):
    """A region declared capturable did what a CUDA graph cannot replay."""


def _op_name(func: Any) -> str:
    return str(func._overloadpacket.__name__)


def _is_bool_index(func: Any, args: tuple[Any, ...]) -> bool:
    if _op_name(func) not in _INDEXING or len(args) < 2:
        return False
    indices = args[1]
    return isinstance(indices, (list, tuple)) and any(
        isinstance(i, Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices
    )


def _caller() -> str:
    """file:line of the first frame outside torch and this module (where the sync was asked for)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/torch/" not in name and not name.endswith("step_audit.py"):
            return f"{name.rsplit('/', 1)[-1]}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


class _Tags:
    """The tensors that live on the training device, by identity (weakly held)."""

    def __init__(self) -> None:
        self.refs: dict[int, weakref.ref[Tensor]] = {}
        self.roots: set[int] = set()  # ids of the tensors `mark` was given (they stay the device's)

    def add(self, t: Tensor) -> None:
        self.refs[id(t)] = weakref.ref(t)

    def has(self, t: object) -> bool:
        if not isinstance(t, Tensor):
            return False
        ref = self.refs.get(id(t))
        return ref is not None and ref() is t

    def is_root(self, t: Tensor) -> bool:
        return id(t) in self.roots

    def drop(self, t: Tensor) -> None:
        self.refs.pop(id(t), None)

    def any(self, values: Iterable[object]) -> bool:
        return any(self.has(v) for v in values)

    def prune(self) -> None:
        self.refs = {k: r for k, r in self.refs.items() if r() is not None}


class _Dispatch(TorchDispatchMode):
    def __init__(self, audit: StepAudit) -> None:
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        audit = self.audit
        name = _op_name(func)
        flat_in, _ = tree_flatten((args, kwargs))
        if _on_meta(flat_in, kwargs):  # shapes only (graphs.ModuleWork's dry forward): no kernel anywhere
            return func(*args, **kwargs)
        on_device = audit.tags.any(flat_in)
        device_op = on_device or audit.explicit_device > 0 or audit.factory_on_device(kwargs)
        if audit.active:  # a host tensor beside device data (a host index): on a GPU, copied first
            audit.count_op(name, device_op, flat_in if on_device else ())
        if on_device and audit.inside_method == 0 and audit.active:
            sync = (
                name in SYNC_OPS
                or (name == "repeat_interleave" and kwargs.get("output_size") is None)
                or _is_bool_index(func, args)
            )
            if sync:
                audit.count_sync(name)
        out = func(*args, **kwargs)
        if device_op:
            flat_out, _ = tree_flatten(out)
            for t in flat_out:
                if isinstance(t, Tensor):
                    audit.tags.add(t)
        if audit.capturable is not None:
            audit.capturable.check_op(name, flat_in, out, on_device)
        return out


def _on_meta(flat_in: list[Any], kwargs: dict[str, Any]) -> bool:
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "meta":
        return True
    return any(isinstance(t, Tensor) and t.is_meta for t in flat_in)


class _Function(TorchFunctionMode):
    def __init__(self, audit: StepAudit) -> None:
        super().__init__()
        self.audit = audit

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        audit = self.audit
        name = getattr(func, "__name__", "")
        if name in SYNC_METHODS and args and audit.tags.has(args[0]) and audit.inside_method == 0 and audit.active:
            audit.count_sync(f"Tensor.{name}")
            audit.inside_method += 1
            try:
                out = func(*args, **kwargs)
            finally:
                audit.inside_method -= 1
            if isinstance(out, Tensor) and (out is not args[0] or not audit.tags.is_root(out)):
                audit.tags.drop(out)  # what `.cpu()` returns is the host's (on CPU: the tensor itself)
            return out
        target = _device_asked(name, args, kwargs)
        if target is None or not audit.is_device(target):
            return func(*args, **kwargs)
        # the training device named (a factory's `device=`, `.to(device)`): on a CPU run the
        # dispatcher sees "cpu" either way, so the request itself says the result is the device's
        source = args[0] if name in _TRANSFERS and args and isinstance(args[0], Tensor) else None
        moved = source is not None and not audit.tags.has(source)
        if moved and audit.capturable is not None:
            raise NotCapturable(f"a copy from host to device memory inside the capturable region (Tensor.{name})")
        calls = audit.device_calls
        audit.explicit_device += 1
        try:
            out = func(*args, **kwargs)
        finally:
            audit.explicit_device -= 1
        if (moved or name in ("tensor", "as_tensor")) and audit.device_calls == calls and audit.active:
            audit.count_op("_to_copy", True)  # a host->device copy a GPU makes and a CPU skips (`.to("cpu")`)
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor):
                audit.tags.add(t)
        return out


_TRANSFERS = frozenset(["to", "cuda"])


def _device_asked(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The device a call names for its result (`device=`, or `.to`'s positional device), if any."""
    device = kwargs.get("device")
    if device is None and name == "to":
        device = next((a for a in args[1:] if isinstance(a, (str, torch.device))), None)
    if device is None and name == "cuda":
        device = "cuda"
    return device if isinstance(device, (str, torch.device, int)) else None


_ACTIVE: list[StepAudit] = []  # the audits entered, innermost last (the `graphable` marker reports to it)


def auditing() -> bool:
    """Whether a StepAudit is counting: a CPU run then takes the path a GPU's graphs take where
    that path is not the CPU's own (`TaskFree.augmented`), so the count is the GPU's."""
    return bool(_ACTIVE)


@contextlib.contextmanager
def graphable() -> Iterator[None]:
    """Marks the step a CUDA graph replays on a GPU (train.Stepper wraps a plain step in it):
    inside, an active audit counts kernel-launching operators as `graphable_ops` (the benchmark's
    "outside" column leaves them out). Nothing when no audit is active (one list check)."""
    if not _ACTIVE:
        yield
        return
    audit = _ACTIVE[-1]
    audit.in_graphable += 1
    try:
        yield
    finally:
        audit.in_graphable -= 1


class StepAudit:
    """Counts host syncs and operators inside `with audit:` (see the module's docstring).
    `device`: the training device (factories that name it make device tensors)."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.tags = _Tags()
        self.syncs: Counter[str] = Counter()
        self.where: Counter[str] = Counter()  # "op at file:line" -> calls
        self.dispatch_ops: Counter[str] = Counter()
        self.inside_method = 0
        self.active = True  # False: operators run (and tags propagate) but nothing is counted
        self.in_graphable = 0
        self.graphable_ops = 0  # kernel-launching operators inside `graphable()` regions
        self.outside_ops: Counter[str] = Counter()  # the others on device data, by operator: launches
        # kernel-type operators on host tensors only (the host's own arithmetic: a draw, its
        # bookkeeping), outside `graphable()`: CPU time on a GPU too, but no launch
        self.host_ops: Counter[str] = Counter()
        self.device_calls = 0  # kernel-type operators on device data (a transfer's check)
        self.explicit_device = 0  # inside a call that names the training device
        self.capturable: Capturable | None = None
        self._modes: list[Any] = []

    # ------------------------------------------------------------------ what lives on the device

    def mark(self, *values: Any) -> StepAudit:
        """Tensors (and tensors inside modules, optimisers, dicts, lists) that are the device's."""
        for v in values:
            for t in _tensors_in(v):
                self.tags.add(t)
                self.tags.roots.add(id(t))
        return self

    def mark_method(self, method: Any) -> StepAudit:
        """A method's device state: its model, optimiser, the run's data and labels, and every
        tensor the method keeps (directly, or in a module, list or dict), except its memory
        (host bookkeeping) and the attributes its class lists in `host_tensors` (CLIB's
        importance: host values by design)."""
        setup = method.setup
        self.mark(method.model, method.optimizer, setup.train_labels, setup.test_labels, method.seen)
        for split in (setup.data.train, setup.data.test):
            self.mark(*[v for v in vars(split).values() if isinstance(v, Tensor)])
        host = set(getattr(method, "host_tensors", ())) | {"memory", "gen", "setup", "sample_rng", "recipe_gen"}
        for key, value in vars(method).items():
            if key not in host:
                self.mark(value)
        return self

    def factory_on_device(self, kwargs: dict[str, Any]) -> bool:
        if self.capturable is not None:  # an allocation inside a captured region: the graph's memory
            return True
        device = kwargs.get("device")
        return device is not None and self.is_device(device) and self.device.type != "cpu"

    def is_device(self, device: str | int | torch.device) -> bool:
        """Whether `device` is the training device ("cuda" and "cuda:0" alike)."""
        d = torch.device(device)
        return d.type == self.device.type and (
            d.index is None or self.device.index is None or d.index == self.device.index
        )

    # ------------------------------------------------------------------ counts

    def count_op(self, name: str, device_op: bool, operands: Iterable[object] = ()) -> None:
        """One operator reached: a launch (`device_op`) inside or outside `graphable()`, or the
        host's own; `operands`' host tensors beside device data add their copies."""
        self.dispatch_ops[name] += 1
        if name in NO_KERNEL:
            return
        self.device_calls += device_op
        if self.in_graphable:
            self.graphable_ops += 1
        elif not device_op:
            self.host_ops[name] += 1
        else:
            self.outside_ops[name] += 1
            copies = sum(1 for t in operands if isinstance(t, Tensor) and t.dim() > 0 and not self.tags.has(t))
            if copies:
                self.outside_ops["_to_copy (a host operand)"] += copies

    def count_sync(self, name: str) -> None:
        self.syncs[name] += 1
        where = f"{name} at {_caller()}"
        self.where[where] += 1
        if self.capturable is not None:
            raise NotCapturable(f"host sync inside the capturable region: {where}")

    @property
    def n_syncs(self) -> int:
        return sum(self.syncs.values())

    @property
    def n_dispatch_ops(self) -> int:
        return sum(self.dispatch_ops.values())

    def kernel_ops(self) -> Counter[str]:
        return Counter({n: c for n, c in self.dispatch_ops.items() if n not in NO_KERNEL})

    @property
    def kernels_outside(self) -> int:
        """Kernel-launching operators on device data issued outside every `graphable()` region."""
        return sum(self.outside_ops.values())

    def reset(self) -> None:
        self.syncs.clear()
        self.where.clear()
        self.dispatch_ops.clear()
        self.graphable_ops = 0
        self.outside_ops.clear()
        self.host_ops.clear()
        self.tags.prune()

    # ------------------------------------------------------------------ the modes

    def __enter__(self) -> StepAudit:
        self._modes = [_Function(self), _Dispatch(self)]
        for m in self._modes:
            m.__enter__()
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.remove(self)
        for m in reversed(self._modes):
            m.__exit__(*exc)
        self._modes = []


class Capturable:
    """`with Capturable(audit):` inside `with audit:` marks a region that must replay as a CUDA
    graph: no sync, no host<->device copy, no tensor made from a host list (`torch.tensor`: a
    graph replays the values of its capture), and each operator with the same shapes as at the
    same position in the previous entry of the region (the first entry records them).
    `ops`: kernel-launching operators issued inside it so far."""

    def __init__(self, audit: StepAudit) -> None:
        self.audit = audit
        self.previous: list[tuple[Any, ...]] | None = None
        self.current: list[tuple[Any, ...]] = []
        self.ops = 0
        self.entries = 0
        self.literals: dict[int, weakref.ref[Tensor]] = {}  # 0-dim host literals made in the region

    def __enter__(self) -> Capturable:
        self.current = []
        self.literals = {}
        self.audit.capturable = self
        return self

    def __exit__(self, *exc: Any) -> None:
        self.audit.capturable = None
        if exc[0] is None:
            if self.previous is not None and len(self.previous) != len(self.current):
                raise NotCapturable(
                    f"the capturable region ran {len(self.current)} operators, {len(self.previous)} the time before"
                )
            self.previous = self.current
            self.entries += 1

    def check_op(self, name: str, flat_in: list[Any], out: Any, on_device: bool) -> None:
        if name not in NO_KERNEL:
            self.ops += 1
        if name == "lift_fresh" and any(isinstance(t, Tensor) and t.dim() > 0 for t in flat_in):
            # torch.tensor(host list): a graph would replay its capture's values
            raise NotCapturable("a tensor made from host values inside the capturable region (torch.tensor)")
        if name == "lift_fresh" and isinstance(out, Tensor):  # a 0-dim host literal (`mask[i] = True`)
            self.literals[id(out)] = weakref.ref(out)  # fine, unless index_put_ takes it (below)
        values = [t for t in flat_in if isinstance(t, Tensor)][-1:] if name in ("index_put", "index_put_") else []
        if values and (ref := self.literals.get(id(values[0]))) is not None and ref() is values[0]:
            # on CUDA index_put_ copies a host 0-dim value to the device (TensorAdvancedIndexing.cpp:
            # `value.to(self.device())`), a pageable copy that a graph capture refuses
            raise NotCapturable(
                f"{name}: an indexed assignment of a Python scalar inside the capturable region "
                "(it is copied from the host; use index_fill_ or masked_fill_)"
            )
        tensors = [t for t in flat_in if isinstance(t, Tensor)]
        if on_device and name in ("_to_copy", "copy_") and not all(self.audit.tags.has(t) for t in tensors):
            raise NotCapturable(f"a copy between host and device memory inside the capturable region ({name})")
        if on_device and any(not self.audit.tags.has(t) and t.dim() > 0 for t in tensors):
            raise NotCapturable(f"{name}: a host tensor used with device tensors inside the capturable region")
        shapes = tuple(tuple(t.shape) for t in tensors)
        # host numbers an operator takes (a slice's start, a scalar): a graph replays its capture's
        # values, so one that changes between entries (a host draw used as an offset) is refused
        numbers = tuple(v for v in flat_in if isinstance(v, (int, float)))
        i = len(self.current)
        self.current.append((name, shapes, numbers))
        if self.previous is not None and i < len(self.previous) and self.previous[i] != (name, shapes, numbers):
            raise NotCapturable(
                f"operator {i} of the capturable region changed: {self.previous[i]} before, "
                f"{(name, shapes, numbers)} now (its shapes or the host numbers it takes)"
            )


def _tensors_in(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
        if value.grad is not None:
            yield value.grad
    elif isinstance(value, torch.nn.Module):
        yield from value.parameters()
        yield from value.buffers()
    elif isinstance(value, torch.optim.Optimizer):
        for state in value.state.values():
            yield from _tensors_in(state)
        for group in value.param_groups:
            yield from _tensors_in([v for v in group.values() if isinstance(v, Tensor)])
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors_in(v)
