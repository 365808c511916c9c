"""Which keys a run reads, and its config as `run` and `show` print it: the keys every run has
(less the task-free-only ones on a task run), then its method's own."""

from __future__ import annotations

from typing import Any

from ..cl.methods import REGISTRY
from ..cl.protocols import is_task_free
from ..methods import readers_of
from .errors import show_value
from .load import config_defaults
from .model import COMMON_KEYS, RUNTIME_KEYS, RunConfig, spec_of

# keys only a task-free run reads (their help says "task-free streams:" / "i-Blurry"; adam and
# exp_reset are refused on the task streams), and where a run runs rather than what it is
TASK_FREE_ONLY = (
    "disjoint_classes",
    "online_iter",
    "eval_period",
    "anytime_class_accuracy",
    "compute_budget",
    "train_gflop_per_sample",
    "optimizer",
    "lr_gamma",
)
# keys of the task protocol that, on a task-free stream, only these built-in methods read: only
# RM and GDumb run memory epochs there (cl/methods/taskfree.py memory_epochs, gdumb.py), only RM
# scores uncertainty. A task-free ER or CLIB run's listing leaves them out; a plug-in's shows them.
TASK_FREE_READERS: dict[str, tuple[str, ...]] = {
    "epochs": ("rm", "gdumb"),
    "memory_batch_size": ("rm", "gdumb"),
    "uncertainty": ("rm",),
    "uncertainty_views": ("rm",),
}


def config_view(config: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(key, value as --set writes it, differs from its default) for the keys a run's method
    reads: the keys every run has (less the task-free-only ones on a task run, and the runtime
    choices when at their defaults), then the method's own; another method's keys, which a run
    stored by an earlier version holds (~61 keys), are left out. What `run` and `show` print."""
    method = config.get("method")
    defaults = config_defaults(method)
    spec = spec_of(method)
    own = set(spec.keys) if spec is not None else set()
    task_free = is_task_free(str(config.get("stream", "")))
    out = []
    for key, value in config.items():
        if key not in COMMON_KEYS and key not in own:
            continue
        if key in TASK_FREE_ONLY and not task_free:
            continue
        if task_free and not reads_on_task_free(method, key):
            continue
        default = defaults.get(key)
        if isinstance(default, tuple):
            default = list(default)
        required = (
            key in defaults
            and RunConfig.model_fields.get(key) is not None
            and RunConfig.model_fields[key].is_required()
        )
        changed = (
            key in defaults
            and not required
            and value != default
            and not (isinstance(value, (list, tuple)) and list(value) == default)
        )
        if (key in RUNTIME_KEYS or value is None) and not changed:  # where it ran, or unset: only when set
            continue
        out.append((key, show_value(value), changed))
    return out


def reads_on_task_free(method: Any, key: str) -> bool:
    """Whether a task-free run of `method` reads `key` (False only for a built-in method that a
    TASK_FREE_READERS row leaves out: ER's `epochs`; a plug-in's reads are not known: True)."""
    readers = TASK_FREE_READERS.get(key)
    return readers is None or method not in REGISTRY or method in readers


def method_reads(method: str | None, key: str) -> bool:
    """Whether a run of `method` reads `key`: every key but the methods' own parameters, which
    only their methods read (a report row shows ER's `rm_variant` as "—", not as RM's default)."""
    readers = readers_of(key)
    return not readers or method is None or method in readers
