"""The metric catalogue: every run result declared once, read by the store and every face.

A `Metric` says what a result is called (name, label, unit), which way is better, which
protocols produce it (rmconsole/cl/protocols.py), how it is computed from ONE run's stored rows
(`RunRows`: plain data the store builds from its tables) or from other runs too (I_last: the
joint-run rule, `AcrossRuns`), whether a partial run may show it (marked `@k/T`), whether runs
can be filtered and sorted by it, how it aggregates over seeds, and how it is written. The
store persists rows and asks `summarize(rows)` for a run's summary; filters, `runs`, `show`,
`report`, `diff`, the exports and the TUI list `catalogue()` instead of spelling names.

Adding a metric is one `Metric(...)` in METRICS below, or a plug-in: an installed package's
entry point in the group `rmconsole.metrics` naming a `Metric` object. rmconsole/metric_registry.py
joins the two (cl/ never reaches outside the science, plug-in discovery included): `metric(name)`,
`metric_names()`, `catalogue()`; the store and the faces ask it.

Pure and torch-free: no store, no config, no UI. The science itself lives in cl/metrics.py
(the RM paper's A/F/I from the accuracy matrix) and cl/metrics_anytime.py (the follow-up's
A_auc and class-wise F_last); each row here names the function it uses.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from typing import Protocol as TypingProtocol

from . import metrics as M
from . import metrics_anytime as MA
from .protocols import PROTOCOLS, Protocol, protocol_of
from .results import RunRows, TaskOutcome, task_figures  # a run's rows and its per-task figures: cl/results.py

Better = Literal["higher", "lower"]


# ---------------------------------------------------------------------- results across runs


class RunLike(TypingProtocol):
    """A run as a cross-run rule sees it (store.RunRecord is one): identity, status, config,
    whether its metrics are partial, and its own per-run metrics by catalogue name."""

    @property
    def id(self) -> int: ...
    @property
    def method(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def config(self) -> Mapping[str, Any]: ...
    @property
    def metrics(self) -> Mapping[str, float | None]: ...
    @property
    def partial(self) -> bool: ...


@dataclass(frozen=True)
class CrossValue:
    """A cross-run metric's value for one run, the run it was measured against, and the config
    keys in which that run differs beyond what the rule allows: (key, this run's value, its value)."""

    value: float | None = None
    against: int | None = None
    differs: tuple[tuple[str, Any, Any], ...] = ()


@dataclass(frozen=True)
class RuleContext:
    """What a cross-run rule needs of the rest of rmconsole, passed in (the catalogue imports
    neither the config nor the methods): the config defaults (a run stored before a key existed
    ran with its default) and the methods' own parameter keys."""

    defaults: Mapping[str, Any] = field(default_factory=dict)
    method_keys: frozenset[str] = frozenset()

    def value(self, config: Mapping[str, Any], key: str) -> Any:
        return config[key] if key in config else self.defaults.get(key)


@dataclass(frozen=True)
class AcrossRuns:
    """How a metric is computed from a run and other runs. `candidates`: the run columns the
    other runs must have (what the store fetches when it reads only some runs); `index` is built
    once over the candidates; `value(run, index, context)` gives each run its CrossValue."""

    candidates: Mapping[str, Any]
    index: Callable[[Iterable[RunLike]], Any]
    value: Callable[[RunLike, Any, RuleContext], CrossValue]
    nothing: str = "no run to match"  # what a face says of a run that has none


# The joint-run rule (I_last). What a joint run must share with a run to be its upper bound: the
# problem (dataset, image size), the network (model) and the seed. Not the training budget: joint
# training sees the whole training set as one task, so its epochs, batch and schedule are its own
# recipe for reaching the upper bound (the paper likewise types one joint accuracy per dataset for
# every method). Not the stream keys either (tasks, blurry, memory): joint training has no stream.
JOINT_KEYS = ("dataset", "model", "seed", "image_size")
# What a joint run may differ in without changing what I_last means: its own training recipe,
# the stream and method keys (it has no stream, no memory, no method parameters), and keys that
# change only how or where a run computes. Any other difference (the augmentation, the top-k,
# the class order, a key added later) is shown beside I_last: `I_last 6.83*` and a note naming
# the joint run and the difference.
JOINT_RECIPE_KEYS = (
    "epochs",
    "batch_size",
    "memory_batch_size",
    "lr",
    "schedule",
    "weight_decay",
    "reset_head",
    "train_head",
)
STREAM_KEYS = (
    "method",
    "memory_size",
    "n_tasks",
    "blurry",
    "stream",
    "uncertainty",
    "uncertainty_views",
    "memory_policy",
)
COMPUTE_KEYS = (
    "device",
    "threads",
    "download",
    "eval_every_epoch",
    "data_pipeline",
    "loader_workers",
    "gpu_decode",
    "amp",
    "channels_last",
    "compile",
    "cuda_graphs",
    "gpus",
)


def joint_key(run: RunLike) -> tuple[str, ...]:
    """The JOINT_KEYS values: a joint run with the same key can be this run's upper bound."""
    return tuple(repr(run.config.get(k)) for k in JOINT_KEYS)


def is_upper_bound(run: RunLike) -> bool:
    """A finished joint run with an A_last: what I_last is measured against."""
    return run.method == "joint" and run.status == "finished" and run.metrics.get("A_last") is not None


def joint_index(runs: Iterable[RunLike]) -> dict[tuple[str, ...], list[RunLike]]:
    """The finished joint runs among `runs`, by JOINT_KEYS, newest first."""
    index: dict[tuple[str, ...], list[RunLike]] = {}
    for run in sorted((r for r in runs if is_upper_bound(r)), key=lambda r: r.id, reverse=True):
        index.setdefault(joint_key(run), []).append(run)
    return index


def upper_bound(run: RunLike, index: Mapping[tuple[str, ...], list[RunLike]]) -> RunLike | None:
    """`run`'s joint run: among finished joint runs with the same JOINT_KEYS and an A_last, the
    newest with the same augmentation, else the newest. (Never the best one: that would be
    selecting on the test set.) A joint run has none: it is the upper bound itself; a partial
    run has none either (a partial A_last is not the run's final accuracy)."""
    if run.method == "joint" or run.partial:
        return None
    matching = index.get(joint_key(run), [])
    augmentation = tuple(run.config.get("augment") or ())
    same = (j for j in matching if tuple(j.config.get("augment") or ()) == augmentation)
    return next(same, matching[0] if matching else None)


def joint_differences(
    run: RunLike, joint: RunLike, context: RuleContext = RuleContext()
) -> tuple[tuple[str, Any, Any], ...]:
    """The keys, beyond the joint run's own recipe, in which `joint` differs from `run`:
    (key, run's value, joint's value), in config order. A key one of them lacks (stored before
    it existed) counts as its default."""
    ignored = {*JOINT_KEYS, *JOINT_RECIPE_KEYS, *STREAM_KEYS, *COMPUTE_KEYS, "seed", *context.method_keys}
    out = []
    for key in dict.fromkeys([*run.config, *joint.config]):
        if key in ignored:
            continue
        mine, theirs = context.value(run.config, key), context.value(joint.config, key)
        if _comparable(mine) != _comparable(theirs):
            out.append((key, mine, theirs))
    return tuple(out)


def _comparable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _intransigence(run: RunLike, index: Any, context: RuleContext) -> CrossValue:
    joint = upper_bound(run, index)
    value = M.intransigence(joint.metrics.get("A_last") if joint is not None else None, run.metrics.get("A_last"))
    if joint is None or value is None:
        return CrossValue(value)
    return CrossValue(value, joint.id, joint_differences(run, joint, context))


JOINT_RULE = AcrossRuns(
    candidates={"method": "joint", "status": "finished"},
    index=joint_index,
    value=_intransigence,
    nothing="no joint run to match",
)


# ---------------------------------------------------------------------- aggregation over seeds


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof=1; None with fewer than two values)."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


# ---------------------------------------------------------------------- the row


@dataclass(frozen=True)
class Metric:
    """One run result, declared once.

    compute: the value from one run's rows (None: not measured); across: the value from the run
    and other runs (the store fetches the candidates; never both). final_only: a partial run's
    value is marked `@k/T` (the letter is the name's first) and never reaches a report cell.
    default_for: the protocols whose reports (and `diff`, the compare page, `runs --json`) list
    it even when no run has it yet; with when_measured, only when a listed run has it.
    family: "" for accuracy metrics, "topk" for the run's top-k figures (k from the run),
    "online" for the loop's compute-aware figures. paper: the RM paper's tables print it
    (`report --paper`). note: the sentence a report's caption adds when it is a column; missing:
    why a run may have no value (said when no cell of a report has one). column: a column of
    the runs tables (`rmconsole runs`, the TUI's runs page) when > 0, the higher the sooner it is
    dropped on a narrow terminal (0: not a column); the first final-only one carries `@k/T`.
    split: the data it is measured on: "test", or "validation" (the held-out train samples of a
    run with val_fraction > 0: what `report --select-by` may select on; selecting on test may not).
    outside: why a run of a protocol it does not apply to has none (what a face writes beside
    its `—`, e.g. I_last of a task-free run)."""

    name: str
    label: str
    help: str
    compute: Callable[[RunRows], float | None] | None = None
    across: AcrossRuns | None = None
    unit: str = "%"
    better: Better = "higher"
    protocols: tuple[Protocol, ...] = PROTOCOLS
    final_only: bool = True
    filterable: bool = True
    sortable: bool = False
    aggregate: Callable[[Sequence[float]], tuple[float | None, float | None]] = mean_std
    digits: int = 2
    default_for: tuple[Protocol, ...] = ()
    when_measured: bool = False
    family: str = ""
    paper: bool = False
    note: str = ""
    missing: str = ""
    column: int = 0
    split: Literal["test", "validation"] = "test"
    outside: str = ""

    @property
    def lower_is_better(self) -> bool:
        return self.better == "lower"

    @property
    def letter(self) -> str:
        """The mark of a partial value: `A@3/5 88.06` for A_last."""
        return self.name[:1]

    def text(self, value: float | None, digits: int | None = None) -> str:
        """`86.00`, `—` when not measured (or NaN)."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "—"
        return f"{value:.{self.digits if digits is None else digits}f}"

    def applies_to(self, protocol: Protocol) -> bool:
        return protocol in self.protocols

    def why_none(self, protocol: Protocol) -> str:
        """Why a run of `protocol` has no value: `outside` when the metric is not of its protocol,
        else the cross-run rule's `nothing` (I_last: no joint run to match), else `missing`."""
        if not self.applies_to(protocol):
            return self.outside or f"not measured for {protocol} runs"
        return self.across.nothing if self.across is not None else self.missing

    def cross(self, run: RunLike, index: Any, context: RuleContext) -> CrossValue:
        """A cross-run metric's value for `run` (nothing for a run of a protocol it does not apply
        to: the rule is never asked, so no face can show a number the metric does not define)."""
        if self.across is None or not self.applies_to(protocol_of(run.config)):
            return CrossValue()
        return self.across.value(run, index, context)

    def value(self, rows: RunRows) -> float | None:
        """This metric of one run (None: not measured, or not of this run's protocol)."""
        if self.compute is None or not self.applies_to(rows.protocol):
            return None
        return checked_value(self.name, self.compute(rows))


class NotFinite(ValueError):
    """A metric's computation returned something that is not a finite number (inf, a string, an
    int past a float's range): the value is refused at the border, never stored."""


def checked_value(name: str, value: Any) -> float | None:
    """A computed metric value as the store keeps it: None for None or NaN (not measured), a count
    (int) as it is, anything else as float; NotFinite (one line naming the metric) for inf, a
    string, or a number no float can hold (10**400), which JSON, PostgreSQL and every reader refuse."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    big = isinstance(value, int) and value.bit_length() > 64  # (repr of a huge int can itself raise)
    shown = f"an integer of {value.bit_length()} bits" if big else repr(value)
    if isinstance(value, (str, bytes)):
        raise NotFinite(f"metric {name!r} returned {shown[:60]}, not a number; stored as missing")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise NotFinite(f"metric {name!r} returned {shown[:60]}, not a finite number; stored as missing") from None
    if math.isnan(number):
        return None
    if not math.isfinite(number):
        raise NotFinite(f"metric {name!r} returned {shown[:60]}, not a finite number; stored as missing")
    return value if isinstance(value, int) and not isinstance(value, bool) else number  # a count stays one


# ---------------------------------------------------------------------- computations of the built-ins


def _on_test(compute: Callable[[RunRows], float | None]) -> Callable[[RunRows], float | None]:
    """A test-split metric: absent (None) for a run that never evaluated on the test set."""

    def of(rows: RunRows) -> float | None:
        return compute(rows) if rows.tested else None

    of.__doc__ = compute.__doc__
    return of


def _last(rows: RunRows) -> float | None:
    return rows.accuracies[-1] if rows.tasks else None


def _average(rows: RunRows) -> float | None:
    return sum(rows.accuracies) / len(rows.tasks) if rows.tasks else None


def _forgetting(rows: RunRows) -> float | None:
    """The RM paper's F_last (per task, over acc[k][j]); a task-free run's is the follow-up's
    class-wise one (cl/metrics_anytime.py)."""
    if rows.protocol == "task-free":
        return MA.class_forgetting([list(t.class_accuracy or []) for t in rows.tasks])
    return M.forgetting(rows.matrix)


def _worst_forgetting(rows: RunRows) -> float | None:
    """F_max: the largest drop of one earlier task, max over j < T-1 of (best acc[k][j] for
    k < T-1) - acc[T-1][j] (F_last is the mean of these drops)."""
    matrix, last = rows.matrix, len(rows.tasks) - 1
    drops = [
        max(b) - end
        for j in range(last)
        if (b := [v for k in range(last) if (v := matrix[k][j]) is not None]) and (end := matrix[last][j]) is not None
    ]
    return max(drops) if drops else None


def _best_epoch(rows: RunRows) -> float | None:
    """The last task's best-over-epochs accuracy, only when every task recorded one."""
    best = [t.best_epoch_accuracy for t in rows.tasks]
    return best[-1] if rows.tasks and all(b is not None for b in best) else None


def _task_mean(name: str) -> Callable[[RunRows], float | None]:
    """The mean of a per-task figure over the tasks that measured it (None: none did)."""

    def compute(rows: RunRows) -> float | None:
        values = [v for t in rows.tasks if (v := getattr(t, name)) is not None]
        return sum(values) / len(values) if values else None

    return compute


def _topk_rows(rows: RunRows) -> RunRows | None:
    if rows.topk is None:
        return None
    # (no per-class top-k figures are stored: the top-k rows are read as the RM paper's, per task)
    return RunRows(
        {},
        [
            TaskOutcome(t.task, t.topk_accuracy, list(t.topk_accuracy_row or []))
            for t in rows.tasks
            if t.topk_accuracy is not None
        ],
    )


def _topk(compute: Callable[[RunRows], float | None]) -> Callable[[RunRows], float | None]:
    def of(rows: RunRows) -> float | None:
        top = _topk_rows(rows)
        return compute(top) if top is not None else None

    return of


def _auc(rows: RunRows) -> float | None:
    return MA.area_under_curve(p.accuracy for p in rows.anytime if p.accuracy is not None)  # all: _on_test


def has_validation(config: Mapping[str, Any]) -> bool:
    """Whether a run held out a validation stream (val_fraction > 0; a run stored before the key
    existed held none). The validation metrics apply only to such runs."""
    return float(config.get("val_fraction") or 0.0) > 0


def _val_rows(rows: RunRows) -> RunRows | None:
    """The run's validation figures read as task rows (None: no validation stream, or a task
    done without its validation figure, e.g. resumed from an older rmconsole)."""
    if not has_validation(rows.config) or not rows.tasks:
        return None
    tasks = []
    for t in rows.tasks:
        if t.val_accuracy is None:
            return None
        tasks.append(TaskOutcome(t.task, t.val_accuracy, list(t.val_accuracy_row or ())))
    return RunRows(rows.config, tasks, n_tasks=rows.n_tasks)


def _validation(compute: Callable[[RunRows], float | None]) -> Callable[[RunRows], float | None]:
    def of(rows: RunRows) -> float | None:
        val = _val_rows(rows)
        return compute(val) if val is not None else None

    return of


def _val_auc(rows: RunRows) -> float | None:
    """A_auc on validation: the mean anytime validation accuracy, when every point measured one."""
    if not has_validation(rows.config) or not rows.anytime or any(p.val_accuracy is None for p in rows.anytime):
        return None
    return MA.area_under_curve(p.val_accuracy for p in rows.anytime if p.val_accuracy is not None)


VALIDATION_NOTE = (
    "(val): measured on the held-out validation stream (val_fraction of each class's training "
    "samples), never on the test set"
)


def _online(key: str) -> Callable[[RunRows], float | None]:
    """A figure the loop reports itself (its clock and counters), kept as the loop gave it."""

    def of(rows: RunRows) -> float | None:
        value = rows.online.get(key)
        return None if value is None else float(value)

    return of


def _anytime_count(rows: RunRows) -> int | None:
    return len(rows.anytime) if rows.anytime else None


def _online_figure(
    name: str, label: str, unit: str, help: str, better: Better = "higher", digits: int = 1, default: bool = False
) -> Metric:
    return Metric(
        name,
        label,
        help,
        compute=_online(name),
        unit=unit,
        better=better,
        protocols=("task-free",),
        final_only=False,
        digits=digits,
        default_for=("task-free",) if default else (),
        family="online",
    )


# Why a task-free run has no I_last (PROTOCOL §7, §9.3). The follow-up defines A_auc, A_avg,
# A_last and F_last and nothing else, so there is no intransigence to follow; and no stored run
# is a task-free run's upper bound: a joint run trains offline on every class of the training set
# in the task protocol, while a task-free run's A_last is on the classes its stream exposed
# (its class counts are floored to multiples of T, so it may leave classes out), labelled by first appearance, after an online pass.
I_LAST_TASK_FREE = "not defined for task-free runs (the follow-up reports no intransigence, docs/protocol.md §9.3)"

TASK_FREE_NOTE = (
    "task-free runs: A_auc = mean anytime accuracy on the classes seen so far, A_last/A_avg at task "
    "ends, F_last class-wise (the follow-up's); train/eval s and samples/s are wall-clock"
)

# What the compute figures count (cl/compute.py, docs/compute.md): said wherever they are shown.
COMPUTE_NOTE = (
    "FLOPs: matmul and convolution only (torch.utils.flop_counter, 2 per multiply-add), measured "
    "on the run's model at each pass's shape; training = forward + backward of every step plus "
    "the forward passes a method makes while learning; not counted: element-wise work (batch norm, "
    "activations, loss, optimiser, augmentation)"
)
BUDGET_NOTE = (
    "at budget: each task-free run's anytime curve read at the last evaluation whose cumulative "
    "training FLOPs are within the budget (Prabhu et al., CVPR 2023); ▲ a run of the cell spent "
    "more than the budget (its curve was cut there)"
)


def _compute_figure(name: str, label: str, unit: str, help: str, digits: int, better: Better = "lower") -> Metric:
    return Metric(
        name,
        label,
        help,
        compute=_online(name),
        unit=unit,
        better=better,
        final_only=False,
        digits=digits,
        family="compute",
        note=COMPUTE_NOTE,
    )


def _at_budget(name: str, label: str, help: str) -> Metric:
    """A figure read at a compute budget: `report --budget` gives it per run (no stored value)."""
    return Metric(
        name,
        label,
        help,
        protocols=("task-free",),
        final_only=False,
        filterable=False,
        family="budget",
        note=BUDGET_NOTE,
        missing="read only by `report --budget TFLOP`, from anytime evaluations that recorded their FLOPs",
    )


METRICS: tuple[Metric, ...] = (
    Metric(
        "A_auc",
        "A_auc",
        "mean anytime accuracy over the stream, on the classes seen so far (the follow-up's)",
        compute=_on_test(_auc),
        protocols=("task-free",),
        final_only=False,
        default_for=("task-free",),
        note=TASK_FREE_NOTE,
        column=8,
    ),
    Metric(
        "A_last",
        "A_last",
        "accuracy on every class seen after the last task",
        compute=_on_test(_last),
        sortable=True,
        default_for=PROTOCOLS,
        paper=True,
        column=1,
    ),
    Metric(
        "A_avg", "A_avg", "mean of the accuracies after each task", compute=_on_test(_average), default_for=PROTOCOLS
    ),
    Metric(
        "F_last",
        "F_last",
        "forgetting after the last task: per task (RM), class-wise (task-free)",
        compute=_on_test(_forgetting),
        better="lower",
        sortable=True,
        default_for=PROTOCOLS,
        paper=True,
        column=5,
    ),
    Metric(
        "I_last",
        "I_last",
        "intransigence: the matching joint run's A_last minus this run's (task runs only)",
        across=JOINT_RULE,
        better="lower",
        protocols=("task",),
        default_for=("task",),
        paper=True,
        column=8,
        missing=(
            f"I_last needs a finished joint run with the same {', '.join(JOINT_KEYS).replace('_', ' ')}; "
            f"{I_LAST_TASK_FREE}"
        ),
        outside=I_LAST_TASK_FREE,
    ),
    Metric(
        "F_max",
        "F_max",
        "the worst forgetting of one task: its best accuracy before the last task minus after",
        compute=_on_test(_worst_forgetting),
        better="lower",
        protocols=("task",),
        sortable=True,
    ),
    Metric(
        "A_last_best_epoch",
        "A_last best-over-epochs (test-set selected)",
        "the last task's best accuracy over its epochs (the authors' figure, selected on the test set)",
        compute=_best_epoch,
        default_for=("task",),
        when_measured=True,
        note="best-over-epochs: the authors' figure, selected on the test set",
    ),
    Metric(
        "A_last_topk",
        "A_last top-k",
        "A_last counting a hit when the label is among the top k",
        compute=_topk(_last),
        default_for=("task",),
        when_measured=True,
        family="topk",
        paper=True,
    ),
    Metric(
        "A_avg_topk",
        "A_avg top-k",
        "A_avg counting a hit when the label is among the top k",
        compute=_topk(_average),
        family="topk",
    ),
    Metric(
        "F_last_topk",
        "F_last top-k",
        "F_last of the top-k accuracies",
        compute=_topk(_forgetting),
        better="lower",
        default_for=("task",),
        when_measured=True,
        family="topk",
        paper=True,
    ),
    Metric(
        "val_A_last",
        "A_last (val)",
        "A_last on the held-out validation stream (val_fraction > 0): what selection reads",
        compute=_validation(_last),
        default_for=PROTOCOLS,
        when_measured=True,
        split="validation",
        column=2,  # (a column while a listed run has it: a `tune` trial's figure, its A_last is —)
        note=VALIDATION_NOTE,
        missing="validation metrics need a run with val_fraction > 0",
    ),
    Metric(
        "val_A_avg",
        "A_avg (val)",
        "A_avg on the held-out validation stream (val_fraction > 0)",
        compute=_validation(_average),
        default_for=PROTOCOLS,
        when_measured=True,
        split="validation",
        column=9,
        note=VALIDATION_NOTE,
        missing="validation metrics need a run with val_fraction > 0",
    ),
    Metric(
        "val_A_auc",
        "A_auc (val)",
        "A_auc on the held-out validation stream (task-free, val_fraction > 0)",
        compute=_val_auc,
        protocols=("task-free",),
        final_only=False,
        default_for=("task-free",),
        when_measured=True,
        split="validation",
        note=VALIDATION_NOTE,
        missing="validation metrics need a run with val_fraction > 0",
    ),
    _online_figure(
        "train_samples_per_s", "train samples/s", "samples/s", "training throughput (wall-clock)", default=True
    ),
    _online_figure("train_seconds", "train s", "s", "wall-clock seconds spent training", better="lower", default=True),
    _online_figure("eval_seconds", "eval s", "s", "wall-clock seconds spent evaluating", better="lower", default=True),
    _online_figure(
        "wall_seconds",
        "wall s",
        "s",
        "wall-clock seconds of the stream's tasks (training, evaluation, reports; not the setup before them)",
        better="lower",
        default=True,
    ),
    _online_figure("samples_seen", "samples seen", "samples", "streamed samples seen", digits=0),
    _online_figure(
        "samples_trained",
        "samples trained",
        "samples",
        "streamed samples the learner received (seen minus skipped; CLIB and GDumb train on their memory)",
        digits=0,
    ),
    _online_figure(
        "samples_skipped",
        "samples skipped",
        "samples",
        "samples not trained on (over the compute budget)",
        better="lower",
        digits=0,
    ),
    _online_figure(
        "evaluations_per_s",
        "evaluations/s",
        "evaluations/s",
        "anytime evaluations per second of eval s (eval s also holds the task-end evaluations)",
    ),
    _online_figure(
        "image_passes",
        "image passes",
        "passes",
        "training compute, compute_budget's unit: 3 per image per optimiser step (forward 1 + backward 2), "
        "1 per image per forward-only pass (CLIB's importance update, MIR's candidate scoring)",
        digits=0,
    ),
    _compute_figure(
        "train_tflop",
        "train TFLOP",
        "TFLOP",
        "training compute: forward + backward of every step and the forward passes a method makes "
        "while learning (matmul and convolution FLOPs, measured on the run's model)",
        4,
    ),
    _compute_figure(
        "eval_tflop",
        "eval TFLOP",
        "TFLOP",
        "evaluation compute: the forward passes of every test and validation evaluation",
        4,
    ),
    _compute_figure(
        "gflop_per_train_sample",
        "GFLOP/trained sample",
        "GFLOP",
        "training GFLOP per stream sample the learner received (all its epochs, replay and scoring included)",
        5,
    ),
    _compute_figure(
        "gflop_per_eval_sample",
        "GFLOP/evaluated sample",
        "GFLOP",
        "evaluation GFLOP per evaluated image (a forward pass)",
        5,
    ),
    _compute_figure(
        "memory_bytes",
        "memory bytes",
        "bytes",
        "the replay memory's samples x bytes each (uint8 image + int64 label) plus the state the method "
        "declares it keeps (Fisher, anchors, importance, old model, class means)",
        0,
    ),
    _compute_figure(
        "device_seconds", "device-seconds", "s", "seconds of training and evaluation x devices used (wall-clock)", 1
    ),
    _at_budget(
        "A_budget",
        "A at budget",
        "anytime accuracy at the last evaluation within the training budget (report --budget TFLOP)",
    ),
    _at_budget(
        "A_auc_budget",
        "A_auc at budget",
        "mean anytime accuracy over the evaluations within the training budget (report --budget TFLOP)",
    ),
    Metric(
        "anytime_evals",
        "anytime evaluations",
        "anytime evaluations taken",
        compute=_anytime_count,
        unit="evaluations",
        protocols=("task-free",),
        final_only=False,
        digits=0,
        family="online",
    ),
    # each per-task figure that TaskOutcome declares (cl/results.py `figure`): its mean over the tasks
    *(
        Metric(
            name,
            f.label,
            f"{f.description}: the mean over the tasks done",
            compute=_task_mean(name),
            unit=f.unit,
            better="lower" if f.better == "lower" else "higher",
            final_only=False,
            digits=f.digits,
            default_for=PROTOCOLS,
            when_measured=True,
        )
        for name, f in task_figures()
    ),
)
BUILTINS: dict[str, Metric] = {m.name: m for m in METRICS}
# the keys `runs --json` has always carried (null when not measured), for consumers of older versions
JSON_ALWAYS = tuple(m.name for m in METRICS if "task" in m.default_for and not m.when_measured)


# ---------------------------------------------------------------------- over a catalogue


def summarize(rows: RunRows, metrics: Sequence[Metric] = METRICS) -> dict[str, float | None]:
    """Every per-run metric of `metrics` (default: the built-ins; rmconsole.metric_registry passes
    the plug-ins too) that applies to the run's protocol, by name (None: not measured). A
    metric whose compute raises is left None and its one line returned by `failures`."""
    out: dict[str, float | None] = {}
    for m in metrics:
        if m.compute is None or not m.applies_to(rows.protocol):
            continue
        if m.name in BUILTINS:
            out[m.name] = m.value(rows)
            continue
        try:
            with contextlib.redirect_stdout(sys.stderr):  # what a plug-in prints never mixes into --json/CSV
                out[m.name] = m.value(rows)
        except NotFinite as err:
            _failures[m.name] = str(err)[:300]
            out[m.name] = None
        except Exception as err:  # noqa: BLE001 - a plug-in's bug must not stop a run's summary
            _failures[m.name] = f"metric {m.name!r} failed on a run's rows: {type(err).__name__}: {err}"[:300]
            out[m.name] = None
    return out


_failures: dict[str, str] = {}


def failures() -> list[str]:
    """One line per plug-in metric whose compute raised (its value was left None)."""
    return list(_failures.values())


def validation_metrics(metrics: Sequence[Metric] = METRICS) -> list[Metric]:
    """The metrics measured on the validation stream (what `report --select-by` may select on)."""
    return [m for m in metrics if m.split == "validation"]


def columns(metrics: Sequence[Metric] = METRICS) -> list[Metric]:
    """The runs tables' metric columns, in catalogue order."""
    return [m for m in metrics if m.column > 0]


def column_when_measured(m: Metric) -> bool:
    """A runs-table column shown only while a listed run has a value of it: one of task-free runs
    only (A_auc), or one listed when measured (the validation figures of a `tune` trial)."""
    return "task" not in m.protocols or m.when_measured


def mark_carrier(shown: Sequence[Metric]) -> Metric | None:
    """Of metric columns side by side, the one that writes a partial run's `@k/T` (the first
    final-only per-run one; the others are only greyed)."""
    return next((m for m in shown if m.final_only and m.across is None), None)


def cross_run_metrics(metrics: Sequence[Metric] = METRICS) -> list[Metric]:
    """The metrics computed from other runs too (I_last)."""
    return [m for m in metrics if m.across is not None]


def listed(
    protocols: Iterable[Protocol],
    measured: Iterable[str] = (),
    metrics: Sequence[Metric] = METRICS,
    family: str | None = None,
) -> list[Metric]:
    """The metrics a face lists for runs of `protocols` (in catalogue order): those a protocol
    lists by default (`default_for`, without when_measured), and any other a run has a value of
    (`measured`: names). `family`: only those of one family."""
    protocols, measured = set(protocols), set(measured)
    out = []
    for m in metrics:
        if family is not None and m.family != family:
            continue
        by_default = bool(protocols & set(m.default_for)) and not m.when_measured
        if by_default or m.name in measured:
            out.append(m)
    return out


def report_default(protocol: Protocol, measured: Iterable[str], metrics: Sequence[Metric] = METRICS) -> list[str]:
    """The metrics a report shows without --metrics for a selection of `protocol`: its defaults,
    and those it shows only when a run measured them."""
    measured = set(measured)
    return [m.name for m in metrics if protocol in m.default_for and (not m.when_measured or m.name in measured)]


__all__ = [
    "BUILTINS",
    "JOINT_KEYS",
    "JOINT_RULE",
    "JSON_ALWAYS",
    "METRICS",
    "VALIDATION_NOTE",
    "AcrossRuns",
    "CrossValue",
    "Metric",
    "RuleContext",
    "RunLike",
    "RunRows",
    "columns",
    "cross_run_metrics",
    "failures",
    "has_validation",
    "is_upper_bound",
    "joint_differences",
    "joint_index",
    "listed",
    "mark_carrier",
    "mean_std",
    "report_default",
    "summarize",
    "upper_bound",
    "validation_metrics",
]
