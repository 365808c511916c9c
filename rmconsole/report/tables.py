"""Report building: stored runs -> a `Report` (rows × column groups of cells, mean ± std over
seeds), and the words of a table (titles, cell text, caption) that every format and figure uses.

Pure: the input is runs as `RunRecord.to_json()` / `store.run_detail` give them (dicts), the
output is a `Report` (formats.py and figures.py turn it into text or a figure). The CLI
chooses the runs.

How cells are made, so that a number in a table always means one setting:
- a row is a value of the `rows` keys (default: method) and a column group a value of the
  `cols` keys. Every other config key that differs between the selected runs (except the
  seed and the runtime keys device/threads/download) goes where it explains the table: into
  the column titles when the column group fixes it (`dataset=mnist (memory_size=500)`, as
  the paper's tables), beside the row when the row fixes it, and otherwise into the row keys,
  so that a cell never mixes two settings;
- a cell averages its **finished** runs, one per seed (the newest if a seed was run twice):
  mean ± sample std (ddof=1) and the count. A cell is *incomplete* (†) when one of its runs is
  not finished or a seed of the selection has no finished run in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .. import metric_registry
from .. import paper as papers
from ..cl.metric_catalog import mean_std
from ..cl.protocols import Protocol, is_task_free, protocol_of
from ..config import TASK_FREE_ONLY, method_reads, reads_on_task_free
from ..store.filters import config_value, format_value
from ..store.filters import where as filter_where

# The metrics, their labels, better direction, default set and which the paper prints: the metric
# catalogue's (rmconsole/metric_registry.py: the built-ins and installed plug-ins).
# keys that change how or where a run computes, or what it records, not what it learns
# (eval_every_epoch only adds test passes after epochs: the trajectory is the same, tested)
RUNTIME_KEYS = (
    "device",
    "threads",
    "download",
    "eval_every_epoch",
    "anytime_class_accuracy",
    "data_pipeline",
    "loader_workers",
    "gpu_decode",
    "amp",
    "channels_last",
    "compile",
    "gpus",
)
RUN_FIELDS = {"preset": "preset", "sweep": "sweep_id", "status": "status"}  # row/col keys beside config keys
SETTING_KEYS = (
    "dataset",
    "model",
    "memory_size",
    "n_tasks",
    "blurry",
    "stream",
    "augment",
    "epochs",
    "disjoint_classes",
    "online_iter",
    "eval_period",
    "image_size",
)
INCOMPLETE = "†"
OVER_BUDGET = "▲"  # --budget: a run of the cell spent more than the budget (read where its curve reached it)


class ReportError(ValueError):
    """A report request that cannot be answered (bad key, no runs): one line for the terminal."""


# ---------------------------------------------------------------------- values


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _method_of(run: dict[str, Any]) -> str | None:
    return run.get("method") or (run.get("config") or {}).get("method")


def key_value(run: dict[str, Any], key: str) -> Any:
    """A run's value for a row/column key: a config key (its default for a run stored before
    the key existed), or preset / sweep / status."""
    if key in RUN_FIELDS:
        return run.get(RUN_FIELDS[key])
    if not method_reads(_method_of(run), key):
        return None  # another method's parameter: this run never read it
    return _hashable(config_value(run.get("config") or {}, key))


def _sort_key(value: Any) -> tuple:
    parts = value if isinstance(value, tuple) else (value,)
    return tuple(
        (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, format_value(v))
        for v in parts
    )


# ---------------------------------------------------------------------- aggregation


@dataclass
class Stat:
    """One metric of one cell: the per-seed values it aggregates, by the metric's own rule (the
    catalogue's `aggregate`: mean and sample std, ddof=1, for every built-in)."""

    values: list[tuple[int, int, float]]  # (run id, seed, value)
    aggregate: Callable[[Sequence[float]], tuple[float | None, float | None]] = mean_std

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return self.aggregate([v for _, _, v in self.values])[0]

    @property
    def std(self) -> float | None:
        """The spread over seeds (sample standard deviation); None with fewer than two seeds."""
        return self.aggregate([v for _, _, v in self.values])[1]


def _paper(metric: str) -> bool:
    """Whether the paper's tables print this metric (`--paper` puts its figure beside it)."""
    return metric_registry.metric(metric).paper


@dataclass
class Cell:
    """The runs of one (row, column group) and their statistics per metric."""

    runs: list[int]  # every selected run in the cell
    used: list[int]  # the finished runs averaged, one per seed
    seeds: list[int]  # the seeds of `used`
    unfinished: list[int]  # runs not finished whose seed has no finished run
    complete: bool
    expected: list[int]  # the seeds a complete cell has
    stats: dict[str, Stat] = field(default_factory=dict)
    # I_last of a run measured against a joint run that differs beyond its recipe (key -> values)
    i_last_differs: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    paper: dict[str, papers.PaperFigure] = field(default_factory=dict)  # with --paper: metric -> figure
    # with --paper: metric -> the protocol keys the cell's runs differ in from the figure's row
    # (empty: the paper's experiment, and only then a Δ is shown)
    paper_differs: dict[str, papers.PaperComparison] = field(default_factory=dict)
    topk: int | None = None  # k of the cell's top-k metrics
    over_budget: list[int] = field(default_factory=list)  # with --budget: used runs that spent more


@dataclass
class Report:
    row_keys: list[str]
    auto_keys: list[str]  # varying keys added to the rows so that cells never mix settings
    col_keys: list[str]
    col_info_keys: list[str]  # keys that differ only between column groups: named in their titles
    label_keys: list[str]  # the columns that name a row
    metrics: list[str]
    rows: list[tuple]  # row identities (values of row_keys + auto_keys)
    row_labels: list[dict[str, Any]]  # label_keys -> value, per row
    cols: list[tuple]  # column-group identities (values of col_keys)
    col_info: list[dict[str, Any]]  # col_info_keys -> value, per column group
    cells: dict[tuple[int, int], Cell]
    seeds: list[int]  # every seed of the selection: what a complete cell has
    constants: dict[str, Any]  # setting keys shared by every run (for the caption)
    n_runs: int
    with_paper: bool = False  # --paper: each metric the paper prints gets "paper" and "Δ" columns
    protocols: frozenset[Protocol] = frozenset()  # the runs' protocols (a metric of another one: its `outside` reason)
    budget: float | None = None  # --budget: the training budget in TFLOP the budget metrics are read at

    def cell(self, row: int, col: int) -> Cell | None:
        return self.cells.get((row, col))

    @property
    def any_incomplete(self) -> bool:
        return any(not c.complete for c in self.cells.values())


def _ordered_keys(runs: Sequence[dict[str, Any]]) -> list[str]:
    keys: list[str] = []
    for run in runs:
        for key in run.get("config") or {}:
            if key not in keys:
                keys.append(key)
    return keys


def _check_keys(option: str, keys: Sequence[str], known: list[str]) -> None:
    allowed = known + [k for k in RUN_FIELDS if k not in known]
    for key in keys:
        if key not in allowed:
            raise ReportError(f"{option} {key!r}: not a config key or run field; allowed: {', '.join(allowed)}")


def build_report(
    runs: Sequence[dict[str, Any]],
    rows: Sequence[str] | None = None,
    cols: Sequence[str] = (),
    metrics: Sequence[str] | None = None,
    only_changed: bool = True,
    paper: bool = False,
    budget: float | None = None,
    over_budget: frozenset[int] = frozenset(),
) -> Report:
    """Group runs into rows × column groups and average each cell's metrics over seeds."""
    if not runs:
        raise ReportError("no runs to report")
    runs = sorted(runs, key=lambda r: r["id"])
    config_keys = _ordered_keys(runs)
    row_keys = list(rows) if rows else ["method"]
    col_keys = list(cols)
    _check_keys("--rows", row_keys, config_keys)
    _check_keys("--cols", col_keys, config_keys)
    both = set(row_keys) & set(col_keys)
    if both:
        raise ReportError(f"{', '.join(sorted(both))} is both a row and a column key; choose one")
    if metrics is None:  # the catalogue's default set for the selection's protocol
        measured = {k for r in runs for k, v in (r.get("metrics") or {}).items() if v is not None}
        task_free = any(is_task_free(r.get("config") or {}) for r in runs)
        metrics = metric_registry.report_default("task-free" if task_free else "task", measured)
    for metric in metrics:
        try:
            metric_registry.metric(metric)
        except metric_registry.UnknownMetric:
            raise ReportError(f"--metrics {metric!r}: allowed: {', '.join(metric_registry.metric_names())}") from None
        except metric_registry.PluginError as err:
            raise ReportError(f"--metrics {metric!r}: {err}") from None

    skip = {"seed", *RUNTIME_KEYS, *row_keys, *col_keys}
    changed = [
        k
        for k in config_keys
        if k not in skip  # (a method's own parameter: among the runs that read it)
        and len({key_value(r, k) for r in runs if method_reads(_method_of(r), k)}) > 1
    ]
    identity, row_info, col_info_keys = list(row_keys), [], []
    for key in changed:  # where a differing key goes: a column title, a row label, or a row split
        if not _constant_within(runs, key, identity + col_keys):
            identity.append(key)  # it differs inside a cell: split the rows so that cells never mix
        elif col_keys and _constant_within(runs, key, col_keys):
            col_info_keys.append(key)  # set by the column group (the paper's "MNIST (K=500)")
        elif _constant_within(runs, key, identity):
            row_info.append(key)  # set by the row: shown beside it
        else:
            identity.append(key)
    auto_keys = identity[len(row_keys) :]
    if only_changed:
        label_keys = identity + row_info
    else:
        label_keys = (
            identity
            + row_info
            + [k for k in config_keys if k not in identity + row_info + col_keys + col_info_keys and k != "seed"]
        )

    row_ids: list[tuple] = []
    row_labels: list[dict[str, Any]] = []
    col_ids: list[tuple] = []
    members: dict[tuple[tuple, tuple], list[dict[str, Any]]] = {}
    for run in runs:
        row = tuple(key_value(run, k) for k in identity)
        col = tuple(key_value(run, k) for k in col_keys)
        if row not in row_ids:
            row_ids.append(row)
            row_labels.append({k: key_value(run, k) for k in label_keys})
        if col not in col_ids:
            col_ids.append(col)
        members.setdefault((row, col), []).append(run)
    col_ids.sort(key=_sort_key)
    col_info = [
        {
            k: next(key_value(r, k) for r in runs if tuple(key_value(r, c) for c in col_keys) == col)
            for k in col_info_keys
        }
        for col in col_ids
    ]

    seeds = sorted({r["seed"] for r in runs})
    seed_is_a_key = "seed" in identity or "seed" in col_keys
    cells: dict[tuple[int, int], Cell] = {}
    for (row, col), group in members.items():
        newest_finished: dict[int, dict[str, Any]] = {}
        for run in group:  # ascending id: a later finished run of the same seed replaces an earlier one
            if run["status"] == "finished":
                newest_finished[run["seed"]] = run
        used = [newest_finished[s] for s in sorted(newest_finished)]
        unfinished = [r["id"] for r in group if r["status"] != "finished" and r["seed"] not in newest_finished]
        expected = sorted({r["seed"] for r in group}) if seed_is_a_key else seeds
        complete = not unfinished and sorted(newest_finished) == expected
        cell = Cell(
            [r["id"] for r in group], [r["id"] for r in used], sorted(newest_finished), unfinished, complete, expected
        )
        cell.over_budget = [r["id"] for r in used if r["id"] in over_budget]
        for metric in metrics:
            cell.stats[metric] = Stat(
                [
                    (r["id"], r["seed"], float(v))
                    for r in used
                    if (v := (r.get("metrics") or {}).get(metric)) is not None and not math.isnan(float(v))
                ],
                metric_registry.metric(metric).aggregate,
            )
        for r in used:
            m = r.get("metrics") or {}
            if m.get("I_last") is not None:
                for key, pair in (m.get("I_last_joint_differs") or {}).items():
                    cell.i_last_differs.setdefault(key, set()).add(
                        (format_value(pair["run"]), format_value(pair["joint"]))
                    )
            if m.get("topk"):
                cell.topk = int(m["topk"])
        if paper and used:
            config = used[0].get("config") or {}
            for metric in metrics:
                found = papers.paper_comparison(config, metric) if _paper(metric) else None
                if found is not None:  # the nearest row of the run's method; a Δ only when the protocol is its
                    cell.paper[metric] = found.figure
                    if not found.matches:
                        cell.paper_differs[metric] = found
        cells[(row_ids.index(row), col_ids.index(col))] = cell

    constants = {}
    all_task_free = all(is_task_free(r.get("config") or {}) for r in runs)
    for key in SETTING_KEYS:
        if key in TASK_FREE_ONLY and not all_task_free:
            continue  # (disjoint_classes, online_iter, eval_period) a task run never reads: not its setting
        if all_task_free and not any(reads_on_task_free(r.get("method"), key) for r in runs):
            continue  # (epochs) no run's method reads it on a task-free stream (ER, CLIB): not its setting
        values = {key_value(r, key) for r in runs}
        if len(values) == 1 and key not in identity and key not in col_keys and None not in values:
            constants[key] = values.pop()
    return Report(
        row_keys,
        auto_keys,
        col_keys,
        col_info_keys,
        label_keys,
        list(metrics),
        row_ids,
        row_labels,
        col_ids,
        col_info,
        cells,
        seeds,
        constants,
        len(runs),
        paper,
        frozenset(protocol_of(r.get("config") or {}) for r in runs),
        budget,
    )


def _constant_within(runs: Sequence[dict[str, Any]], key: str, group_by: list[str]) -> bool:
    """True when `key` has one value inside every group of runs that agree on `group_by`."""
    seen: dict[tuple, Any] = {}
    for run in runs:
        group = tuple(key_value(run, k) for k in group_by)
        value = key_value(run, key)
        if seen.setdefault(group, value) != value:
            return False
    return True


# ---------------------------------------------------------------------- text pieces


def col_title(report: Report, col: tuple) -> str:
    """`dataset=mnist (memory_size=500, model=mlp400)`: the group's keys, then what it implies."""
    title = " ".join(f"{k}={format_value(v)}" for k, v in zip(report.col_keys, col))
    info = report.col_info[report.cols.index(col)] if report.col_info_keys else {}
    return title + (f" ({', '.join(f'{k}={format_value(v)}' for k, v in info.items())})" if info else "")


def metric_title(metric: str, arrows: bool = True, arrow_up: str = "↑", arrow_down: str = "↓") -> str:
    part, _, base = metric.rpartition(":")
    if part:  # a --paper column
        return f"{'paper' if part == 'paper' else 'Δ'} {metric_registry.metric(base).label}"
    label = metric_registry.metric(metric).label
    if not arrows:
        return label
    return f"{label} {arrow_down if metric_registry.metric(metric).lower_is_better else arrow_up}"


def cell_text(
    report: Report, cell: Cell | None, metric: str, digits: int = 2, pm: str = "±", mark: str = INCOMPLETE
) -> str:
    """`91.80 ± 0.69`, with `(n=2)` when fewer seeds than the selection has, and † when incomplete;
    `6.83*` for an I_last measured against joint runs that differ beyond their recipe. With
    --paper, `paper:M` is the paper's figure and `diff:M` this cell's mean minus it."""
    if cell is None:
        return ""
    part, _, base = metric.rpartition(":")
    if part:
        figure = cell.paper.get(base)
        if figure is None:
            return ""
        if part == "paper":
            return figure.text(digits)
        differs = cell.paper_differs.get(base)
        if differs is not None:  # not the paper's protocol: no Δ, the keys that differ instead
            return f"≠ {differs.differs_text(limit=2)}"
        mean = cell.stats[base].mean
        return "" if mean is None else f"{mean - figure.mean:+.{digits}f}" + ("" if cell.complete else mark)
    stat = cell.stats[metric]
    if metric_registry.metric(metric).family == "compute":  # TFLOP, bytes: at the catalogue's own precision
        digits = metric_registry.metric(metric).digits
    if stat.mean is None:
        text = "—"
    elif stat.std is None:
        text = f"{stat.mean:.{digits}f}"
    else:
        text = f"{stat.mean:.{digits}f} {pm} {stat.std:.{digits}f}"
    if metric == "I_last" and cell.i_last_differs and stat.mean is not None:
        text += "*"
    if cell.over_budget and metric_registry.metric(metric).family == "budget" and stat.mean is not None:
        text += OVER_BUDGET
    if stat.n and stat.n != len(cell.expected):
        text += f" (n={stat.n})"
    if not cell.complete:
        text += mark
    return text


# where every mark of a table, `show` and the TUI is explained (± and its granularity, @k/T, †, Δ)
GLOSSARY_POINTER = "symbols and the granularity of ±: docs/glossary.md"


def caption(report: Report) -> str:
    """What the numbers are: the shared setting, the seeds, and the marks used."""
    setting = ", ".join(f"{k}={format_value(v)}" for k, v in report.constants.items())
    n = len(report.seeds)
    parts = [setting] if setting else []
    if "seed" in report.row_keys + report.auto_keys + report.col_keys:
        parts.append("one seed per cell (seed is a row or column key), finished runs only, last-epoch accuracy in %")
    else:
        parts.append(
            f"mean ± std (sample, ddof=1) over {n} seed{'s' if n != 1 else ''} "
            f"({', '.join(map(str, report.seeds))}), finished runs only, last-epoch accuracy in %"
        )
    if any(s.n and s.n != len(c.expected) for c in report.cells.values() for s in c.stats.values()):
        parts.append("(n=k): only k seeds have this value")
    if report.any_incomplete:
        parts.append(f"{INCOMPLETE} incomplete: a run is not finished or a seed is missing")
    shown = [metric_registry.metric(m) for m in report.metrics]
    for m in shown:  # why a column is empty, and what a column means (the catalogue's words)
        if m.missing and all(c.stats[m.name].n == 0 for c in report.cells.values()):
            parts.append(m.missing)
        elif m.outside and any(not m.applies_to(p) for p in report.protocols):  # e.g. I_last of task-free rows
            parts.append(f"{m.name}: {m.outside}")
    parts += [m.note for m in shown if m.note]
    ks = sorted({c.topk for c in report.cells.values() if c.topk})
    if ks and any(m.family == "topk" for m in shown):
        parts.append(f"top-k: k={', '.join(map(str, ks))} (the run's topk; the other figures are top-1)")
    differs: dict[str, set[tuple[str, str]]] = {}
    for cell in report.cells.values():
        for key, pairs in cell.i_last_differs.items():
            differs.setdefault(key, set()).update(pairs)
    if "I_last" in report.metrics and differs:
        what = "; ".join(
            f"{key} " + ", ".join(f"{here} here vs {there}" for here, there in sorted(pairs))
            for key, pairs in differs.items()
        )
        parts.append(f"* I_last against a joint run that differs beyond its own training recipe: {what}")
    if report.with_paper:
        used = sorted({(f.tex_order, f.label) for c in report.cells.values() for f in c.paper.values()})
        parts.append(
            "paper: Bang et al., CVPR 2021, "
            + (", ".join(f"table {o} ({label})" for o, label in used) if used else "no matching figure")
            + "; Δ = this table's mean minus the paper's, only where "
            "the runs follow the paper's protocol (dataset, model, K, tasks, stream, blurry, epochs, "
            "augment); elsewhere ≠ names the keys that differ (run≠paper)"
        )
    if report.budget is not None:
        over = sum(len(c.over_budget) for c in report.cells.values())
        parts.append(
            f"budget {report.budget:g} TFLOP of training: {over} run{'s' if over != 1 else ''} spent more ({OVER_BUDGET})"
        )
    if report.auto_keys:
        parts.append(f"rows also split by {', '.join(report.auto_keys)} (they differ between runs)")
    parts.append(GLOSSARY_POINTER)
    return "; ".join(dict.fromkeys(parts))  # (metrics that share a note, e.g. the validation ones: said once)


def _metric_columns(report: Report) -> list[str]:
    """The value columns of one column group: each metric, and with --paper `paper:M` and
    `diff:M` after each metric the paper prints."""
    out = []
    for metric in report.metrics:
        out.append(metric)
        if report.with_paper and _paper(metric):
            out += [f"paper:{metric}", f"diff:{metric}"]
    return out


def _header(report: Report) -> list[tuple[tuple, str]]:
    """(column group, metric) per value column, in table order."""
    return [(col, metric) for col in report.cols for metric in _metric_columns(report)]


def row_title(report: Report, row: int) -> str:
    labels = report.row_labels[row]
    keys = report.row_keys + report.auto_keys
    if keys == ["method"]:
        return format_value(labels["method"])
    return ", ".join(f"{k}={format_value(labels[k])}" if k != "method" else format_value(labels[k]) for k in keys)


def select(runs: Iterable[dict[str, Any]], where: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Runs whose value of every `where` key is among the given ones (`--where KEY=V1,V2`), by
    the run filter grammar's rule: values read as on the command line, compared as tables
    write them (`augment=none` matches [])."""
    terms = [filter_where(key, values) for key, values in where.items()]
    return [r for r in runs if all(t.matches(partial(key_value, r)) for t in terms)]
