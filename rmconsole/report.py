"""Reports: stored runs -> tables (mean ± std over seeds) and figures.

Pure: the input is runs as `RunRecord.to_json()` / `store.run_detail` give them (dicts), the
output is text (markdown, CSV, LaTeX, JSON), a Rich table, or a PNG file. The CLI chooses
the runs.

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

import csv
import errno
import io
import json
import math
import os
import stat
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Optional, Sequence, Union

from . import metric_registry, outputs, paper as papers
from .cl.metric_catalog import mean_std
from .cl.protocols import is_task_free, protocol_of
from .config import method_reads
from .store.filters import config_value, format_value, where as filter_where

# The metrics, their labels, better direction, default set and which the paper prints: the metric
# catalogue's (rmconsole/metric_registry.py: the built-ins and installed plug-ins).
# keys that change how or where a run computes, or what it records, not what it learns
# (eval_every_epoch only adds test passes after epochs: the trajectory is the same, tested)
RUNTIME_KEYS = ("device", "threads", "download", "eval_every_epoch", "anytime_class_accuracy",
                "data_pipeline", "loader_workers", "gpu_decode", "amp", "channels_last", "compile", "gpus")
RUN_FIELDS = {"preset": "preset", "sweep": "sweep_id", "status": "status"}  # row/col keys beside config keys
SETTING_KEYS = ("dataset", "model", "memory_size", "n_tasks", "blurry", "stream", "augment", "epochs",
                "disjoint_classes", "online_iter", "eval_period", "image_size")
FORMATS = ("table", "md", "csv", "latex", "json")
INCOMPLETE = "†"


class ReportError(ValueError):
    """A report request that cannot be answered (bad key, no runs): one line for the terminal."""


class OutputError(ReportError):
    """A report file that cannot be written where asked: one line, and nothing left behind."""


# ---------------------------------------------------------------------- output files


def _special(path: Path) -> bool:
    """A device, FIFO or socket (e.g. /dev/stdout): written in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _shown(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:59]}…{text[-59:]}"


def _os_reason(err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on device"
    return err.strerror or type(err).__name__


def check_output(path: Path, option: str) -> None:
    """Refuse, before any work, a report path that cannot be written: a folder, a path under a
    file, a read-only or unwritable place, a name too long (OutputError, one line); rmconsole's own
    files, link loops, links to missing folders, block devices (outputs.check_file)."""
    path = Path(path)
    outputs.check_file(path, option)
    try:
        if _special(path):
            return
        target = Path(os.path.realpath(path))  # a symlink is written through, to its target
        if target.is_dir():
            raise OutputError(f"{option} {_shown(path)}: is a directory; give a file name (e.g. {_shown(path / 'report')}"
                              f"{path.suffix or '.md'})")
        folder = target.parent
        while not folder.exists():
            folder = folder.parent
        if not folder.is_dir():
            raise OutputError(f"{option} {_shown(path)}: {_shown(folder)} is a file, not a folder")
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            raise OutputError(f"{option} {_shown(path)}: {_shown(folder)} is on a read-only file system")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise OutputError(f"{option} {_shown(path)}: {_shown(folder)} is not writable")
        if target.exists() and not os.access(target, os.W_OK):
            raise OutputError(f"{option} {_shown(path)}: the file is not writable")
        if len(target.name.encode()) > os.pathconf(folder, "PC_NAME_MAX"):
            raise OutputError(f"{option} {_shown(path)}: the file name is too long")
    except OSError as err:
        raise OutputError(f"cannot write {option} {_shown(path)}: {_os_reason(err)}") from None


def write_output(path: Path | str, data: Union[bytes, Callable[[IO[bytes]], None]], option: str = "--out") -> Path:
    """Write a report file. A regular file is replaced atomically (a temporary file beside it,
    fsync, rename; the temporary file removed on any failure); a symlink is written through to
    its target (the link stays a link); a device or FIFO such as /dev/stdout is written in place.
    Any failure is OutputError, one line."""
    path = Path(path)
    write = (lambda f: f.write(data)) if isinstance(data, (bytes, bytearray)) else data
    outputs.check_file(path, option)  # never the store, a checkpoint, a log: whatever the link says
    try:
        if _special(path):
            with open(path, "wb") as f:
                write(f)
            return path
        check_output(path, option)
        target = Path(os.path.realpath(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = (os.stat(target).st_mode & 0o7777) if target.exists() else 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:100]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise OutputError(f"cannot write {option} {_shown(path)}: {_os_reason(err)}") from None
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------- values


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _method_of(run: dict[str, Any]) -> Optional[str]:
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
    return tuple((0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, format_value(v))
                 for v in parts)


# ---------------------------------------------------------------------- aggregation


@dataclass
class Stat:
    """One metric of one cell: the per-seed values it aggregates, by the metric's own rule (the
    catalogue's `aggregate`: mean and sample std, ddof=1, for every built-in)."""

    values: list[tuple[int, int, float]]  # (run id, seed, value)
    aggregate: Callable[[Sequence[float]], tuple[Optional[float], Optional[float]]] = mean_std

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> Optional[float]:
        return self.aggregate([v for _, _, v in self.values])[0]

    @property
    def std(self) -> Optional[float]:
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
    paper: dict[str, "papers.PaperFigure"] = field(default_factory=dict)  # with --paper: metric -> figure
    topk: Optional[int] = None  # k of the cell's top-k metrics


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

    def cell(self, row: int, col: int) -> Optional[Cell]:
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


def build_report(runs: Sequence[dict[str, Any]], rows: Sequence[str] | None = None, cols: Sequence[str] = (),
                 metrics: Sequence[str] | None = None, only_changed: bool = True, paper: bool = False) -> Report:
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
    changed = [k for k in config_keys if k not in skip  # (a method's own parameter: among the runs that read it)
               and len({key_value(r, k) for r in runs if method_reads(_method_of(r), k)}) > 1]
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
    auto_keys = identity[len(row_keys):]
    if only_changed:
        label_keys = identity + row_info
    else:
        label_keys = identity + row_info + [k for k in config_keys if k not in identity + row_info + col_keys
                                            + col_info_keys and k != "seed"]

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
    col_info = [{k: next(key_value(r, k) for r in runs if tuple(key_value(r, c) for c in col_keys) == col)
                 for k in col_info_keys} for col in col_ids]

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
        cell = Cell([r["id"] for r in group], [r["id"] for r in used], sorted(newest_finished), unfinished, complete,
                    expected)
        for metric in metrics:
            cell.stats[metric] = Stat([(r["id"], r["seed"], float(v)) for r in used
                                       if (v := (r.get("metrics") or {}).get(metric)) is not None
                                       and not math.isnan(float(v))], metric_registry.metric(metric).aggregate)
        for r in used:
            m = r.get("metrics") or {}
            if m.get("I_last") is not None:
                for key, pair in (m.get("I_last_joint_differs") or {}).items():
                    cell.i_last_differs.setdefault(key, set()).add((format_value(pair["run"]), format_value(pair["joint"])))
            if m.get("topk"):
                cell.topk = int(m["topk"])
        if paper and used:
            config = used[0].get("config") or {}
            for metric in metrics:
                figure = papers.paper_figure(config, metric) if _paper(metric) else None
                if figure is not None:
                    cell.paper[metric] = figure
        cells[(row_ids.index(row), col_ids.index(col))] = cell

    constants = {}
    for key in SETTING_KEYS:
        values = {key_value(r, key) for r in runs}
        if len(values) == 1 and key not in identity and key not in col_keys and None not in values:
            constants[key] = values.pop()
    return Report(row_keys, auto_keys, col_keys, col_info_keys, label_keys, list(metrics), row_ids, row_labels,
                  col_ids, col_info, cells, seeds, constants, len(runs), paper)


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


def cell_text(report: Report, cell: Optional[Cell], metric: str, digits: int = 2, pm: str = "±",
              mark: str = INCOMPLETE) -> str:
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
        mean = cell.stats[base].mean
        return "" if mean is None else f"{mean - figure.mean:+.{digits}f}"
    stat = cell.stats[metric]
    if stat.mean is None:
        text = "—"
    elif stat.std is None:
        text = f"{stat.mean:.{digits}f}"
    else:
        text = f"{stat.mean:.{digits}f} {pm} {stat.std:.{digits}f}"
    if metric == "I_last" and cell.i_last_differs and stat.mean is not None:
        text += "*"
    if stat.n and stat.n != len(cell.expected):
        text += f" (n={stat.n})"
    if not cell.complete:
        text += mark
    return text


def caption(report: Report) -> str:
    """What the numbers are: the shared setting, the seeds, and the marks used."""
    setting = ", ".join(f"{k}={format_value(v)}" for k, v in report.constants.items())
    n = len(report.seeds)
    parts = [setting] if setting else []
    if "seed" in report.row_keys + report.auto_keys + report.col_keys:
        parts.append("one seed per cell (seed is a row or column key), finished runs only, last-epoch accuracy in %")
    else:
        parts.append(f"mean ± std (sample, ddof=1) over {n} seed{'s' if n != 1 else ''} "
                     f"({', '.join(map(str, report.seeds))}), finished runs only, last-epoch accuracy in %")
    if any(s.n and s.n != len(c.expected) for c in report.cells.values() for s in c.stats.values()):
        parts.append("(n=k): only k seeds have this value")
    if report.any_incomplete:
        parts.append(f"{INCOMPLETE} incomplete: a run is not finished or a seed is missing")
    shown = [metric_registry.metric(m) for m in report.metrics]
    for m in shown:  # why a column is empty, and what a column means (the catalogue's words)
        if m.missing and all(c.stats[m.name].n == 0 for c in report.cells.values()):
            parts.append(m.missing)
    parts += [m.note for m in shown if m.note]
    ks = sorted({c.topk for c in report.cells.values() if c.topk})
    if ks and any(m.family == "topk" for m in shown):
        parts.append(f"top-k: k={', '.join(map(str, ks))} (the run's topk; the other figures are top-1)")
    differs: dict[str, set[tuple[str, str]]] = {}
    for cell in report.cells.values():
        for key, pairs in cell.i_last_differs.items():
            differs.setdefault(key, set()).update(pairs)
    if "I_last" in report.metrics and differs:
        what = "; ".join(f"{key} " + ", ".join(f"{here} here vs {there}" for here, there in sorted(pairs))
                         for key, pairs in differs.items())
        parts.append(f"* I_last against a joint run that differs beyond its own training recipe: {what}")
    if report.with_paper:
        used = sorted({(f.tex_order, f.label) for c in report.cells.values() for f in c.paper.values()})
        parts.append("paper: Bang et al., CVPR 2021, " + (", ".join(f"table {o} ({label})" for o, label in used)
                     if used else "no matching figure") + "; Δ = this table's mean minus the paper's")
    if report.auto_keys:
        parts.append(f"rows also split by {', '.join(report.auto_keys)} (they differ between runs)")
    return "; ".join(parts)


def _metric_columns(report: Report) -> list[str]:
    """The value columns of one column group: each metric, and with --paper `paper:M` and
    `diff:M` after each metric the paper prints."""
    out = []
    for metric in report.metrics:
        out.append(metric)
        if report.with_paper and _paper(metric):
            out += [f"paper:{metric}", f"diff:{metric}"]
    return out


def _header(report: Report) -> list[tuple[Optional[tuple], str]]:
    """(column group, metric) per value column, in table order."""
    return [(col, metric) for col in report.cols for metric in _metric_columns(report)]


# ---------------------------------------------------------------------- formats


def to_markdown(report: Report, digits: int = 2) -> str:
    heads = list(report.label_keys)
    for col, metric in _header(report):
        title = metric_title(metric)
        heads.append(f"{col_title(report, col)} {title}".strip() if report.col_keys else title)
    lines = ["| " + " | ".join(heads) + " |",
             "|" + "|".join([":--"] * len(report.label_keys) + ["--:"] * (len(heads) - len(report.label_keys))) + "|"]
    for i, labels in enumerate(report.row_labels):
        values = [format_value(labels[k]) for k in report.label_keys]
        for j, col in enumerate(report.cols):
            values += [cell_text(report, report.cell(i, j), m, digits) for m in _metric_columns(report)]
        lines.append("| " + " | ".join(v.replace("|", "\\|") for v in values) + " |")
    return "\n".join(lines) + f"\n\nTable: {caption(report)}\n"


def _csv_value(value: Optional[float]) -> str:
    return "" if value is None else repr(float(value))


def to_csv(report: Report) -> str:
    """One line per table row; per cell: mean, std, n (seeds with a value) and complete."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    heads = list(report.label_keys)
    for col in report.cols:
        for metric in report.metrics:
            prefix = f"{col_title(report, col)} {metric}".strip() if report.col_keys else metric
            heads += [f"{prefix} mean", f"{prefix} std", f"{prefix} n", f"{prefix} complete"]
            if report.with_paper and _paper(metric):
                heads += [f"{prefix} paper mean", f"{prefix} paper std", f"{prefix} paper source"]
    writer.writerow(heads)
    for i, labels in enumerate(report.row_labels):
        values = [format_value(labels[k]) for k in report.label_keys]
        for j, col in enumerate(report.cols):
            cell = report.cell(i, j)
            for metric in report.metrics:
                with_paper = report.with_paper and _paper(metric)
                if cell is None:
                    values += ["", "", "0", "false"] + (["", "", ""] if with_paper else [])
                    continue
                stat = cell.stats[metric]
                values += [_csv_value(stat.mean), _csv_value(stat.std), str(stat.n), str(cell.complete).lower()]
                if with_paper:
                    figure = cell.paper.get(metric)
                    values += ["", "", ""] if figure is None else \
                        [_csv_value(figure.mean), _csv_value(figure.std), figure.source]
        writer.writerow(values)
    return out.getvalue()


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def to_dict(report: Report) -> dict[str, Any]:
    """The JSON shape: every cell with its per-run values, so numbers can be traced to runs."""
    rows = []
    for i, labels in enumerate(report.row_labels):
        cells = []
        for j, col in enumerate(report.cols):
            cell = report.cell(i, j)
            if cell is None:
                continue
            cells.append({
                "col": {k: _jsonable(v) for k, v in zip(report.col_keys, col)},
                "col_setting": {k: _jsonable(v) for k, v in report.col_info[j].items()},
                "runs": cell.runs, "used_runs": cell.used, "seeds": cell.seeds,
                "unfinished_runs": cell.unfinished, "complete": cell.complete, "expected_seeds": cell.expected,
                "metrics": {m: {"mean": s.mean, "std": s.std, "n": s.n,
                                "values": [{"run": r, "seed": seed, "value": v} for r, seed, v in s.values]}
                            for m, s in cell.stats.items()},
                "i_last_joint_differs": {k: sorted(v) for k, v in cell.i_last_differs.items()},
                "paper": {m: {"mean": f.mean, "std": f.std, "topk": f.topk, "source": f.source, "note": f.note}
                          for m, f in cell.paper.items()},
            })
        rows.append({"row": {k: _jsonable(labels[k]) for k in report.label_keys}, "cells": cells})
    return {
        "rows_by": report.row_keys, "rows_also_by": report.auto_keys, "cols_by": report.col_keys,
        "cols_also_differ_in": report.col_info_keys,
        "metrics": report.metrics, "seeds": report.seeds, "n_runs": report.n_runs,
        "setting": {k: _jsonable(v) for k, v in report.constants.items()},
        "std": "sample (ddof=1) over seeds; finished runs only", "caption": caption(report), "rows": rows,
    }


def to_json(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "—": "--"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(report: Report, digits: int = 2) -> str:
    """A booktabs tabular, cells as `mean $\\pm$ std`, column groups under \\cmidrule'd headers."""
    n_labels = len(report.label_keys)
    n_metrics = len(_metric_columns(report))
    spec = "@{}" + "l" * n_labels + "r" * (n_metrics * len(report.cols)) + "@{}"
    note = latex_escape(caption(report)).replace("±", "$\\pm$")
    lines = [f"% rmconsole report: {note}", "% needs \\usepackage{booktabs}",
             f"\\begin{{tabular}}{{{spec}}}", "\\toprule"]
    if report.col_keys:
        groups = [f"\\multicolumn{{{n_metrics}}}{{c}}{{{latex_escape(col_title(report, c))}}}" for c in report.cols]
        lines.append(" & ".join([""] * n_labels + groups) + " \\\\")
        rules = []
        for j in range(len(report.cols)):
            first = n_labels + j * n_metrics + 1
            rules.append(f"\\cmidrule(lr){{{first}-{first + n_metrics - 1}}}")
        lines.append(" ".join(rules))
    heads = [latex_escape(k) for k in report.label_keys]
    for _, metric in _header(report):
        heads.append(latex_escape(metric_title(metric, arrows=False)).replace("Δ", "$\\Delta$") +
                     ("" if ":" in metric else " ($\\downarrow$)" if metric_registry.metric(metric).lower_is_better else " ($\\uparrow$)"))
    lines.append(" & ".join(heads) + " \\\\")
    lines.append("\\midrule")
    for i, labels in enumerate(report.row_labels):
        values = [latex_escape(format_value(labels[k])) for k in report.label_keys]
        for j, _ in enumerate(report.cols):
            for metric in _metric_columns(report):
                text = cell_text(report, report.cell(i, j), metric, digits, pm="$\\pm$", mark="$^\\dagger$")
                values.append(text.replace("—", "--"))
        lines.append(" & ".join(values) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def rich_table(report: Report, digits: int = 2) -> Any:
    """The terminal form: a Rich table with the caption underneath (as wide as the terminal)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for key in report.label_keys:
        table.add_column(key)
    for col, metric in _header(report):
        title = metric_title(metric)
        table.add_column(f"{col_title(report, col)}\n{title}" if report.col_keys else title, justify="right")
    for i, labels in enumerate(report.row_labels):
        values = [format_value(labels[k]) for k in report.label_keys]
        for j, _ in enumerate(report.cols):
            for metric in _metric_columns(report):
                text = cell_text(report, report.cell(i, j), metric, digits)
                cell = report.cell(i, j)
                values.append(f"[yellow]{text}[/]" if cell is not None and not cell.complete else text)
        table.add_row(*values)
    return Group(table, Text(caption(report), style="dim"))


def render(report: Report, fmt: str, digits: int = 2) -> str:
    """Text in one of the file formats (md, csv, latex, json)."""
    if fmt == "md":
        return to_markdown(report, digits)
    if fmt == "csv":
        return to_csv(report)
    if fmt == "latex":
        return to_latex(report, digits)
    if fmt == "json":
        return to_json(report)
    raise ReportError(f"--format {fmt!r}: allowed: {', '.join(FORMATS)}")


# ---------------------------------------------------------------------- figures


def row_title(report: Report, row: int) -> str:
    labels = report.row_labels[row]
    keys = report.row_keys + report.auto_keys
    if keys == ["method"]:
        return format_value(labels["method"])
    return ", ".join(f"{k}={format_value(labels[k])}" if k != "method" else format_value(labels[k]) for k in keys)


@dataclass
class Curve:
    """Accuracy after each task of one cell: mean and std over its finished seeds."""

    label: str
    mean: list[float]
    std: list[float]
    n: int


def accuracy_curves(report: Report, details: dict[int, dict[str, Any]]) -> dict[int, list[Curve]]:
    """Per column group, one curve per row from the runs' per-task accuracies (`show --json`'s
    tasks[].accuracy): mean over the cell's finished seeds and the sample std (0 with one seed)."""
    import numpy as np

    out: dict[int, list[Curve]] = {}
    for (i, j), cell in sorted(report.cells.items()):
        series = []
        for run_id in cell.used:
            accs = [t.get("accuracy") for t in details[run_id].get("tasks", [])]
            series.append([np.nan if a is None else float(a) for a in accs])
        if not series:
            continue
        width = max(len(s) for s in series)
        grid = np.full((len(series), width), np.nan)
        for k, s in enumerate(series):
            grid[k, :len(s)] = s
        counts = (~np.isnan(grid)).sum(axis=0)
        mean = np.where(counts > 0, np.nansum(grid, axis=0) / np.maximum(counts, 1), np.nan)
        centred = np.where(np.isnan(grid), 0.0, grid - mean)
        std = np.where(counts > 1, np.sqrt((centred ** 2).sum(axis=0) / np.maximum(counts - 1, 1)), 0.0)
        out.setdefault(j, []).append(Curve(row_title(report, i), mean.tolist(), std.tolist(), len(series)))
    return out


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, option: str = "--plot") -> Path:
    fmt = Path(path).suffix.lower().lstrip(".") or "png"
    try:
        return write_output(path, lambda f: fig.savefig(f, format=fmt, dpi=150), option)
    finally:
        _pyplot().close(fig)


def plot_accuracy(report: Report, details: dict[int, dict[str, Any]], path: Path | str) -> Path:
    """Accuracy after each task per row (method), mean over seeds with a ±std band, one panel per
    column group: the paper's Figure 4. A single-task run (joint) is drawn as a dashed level."""
    curves = accuracy_curves(report, details)
    if not curves:
        raise ReportError("--plot: no finished run among the selected runs, nothing to draw")
    plt = _pyplot()
    panels = [j for j in range(len(report.cols)) if j in curves]
    ncols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(6.4, 5.2 * ncols), 4.4 * nrows), squeeze=False, sharey=True)
    colours = plt.get_cmap("tab10")
    labels_order = [row_title(report, i) for i in range(len(report.rows))]
    for ax, j in zip(axes.flat, panels):
        longest = max(len(c.mean) for c in curves[j])
        for curve in curves[j]:
            k = labels_order.index(curve.label)  # colour, marker and dash differ, so equal curves stay visible
            colour = colours(k % 10)
            label = f"{curve.label} (n={curve.n})"
            if len(curve.mean) == 1 and longest > 1:
                ax.axhline(curve.mean[0], color=colour, linestyle="--", label=f"{label}, one task")
                continue
            x = list(range(1, len(curve.mean) + 1))
            ax.plot(x, curve.mean, marker="osD^v<>ph*"[k % 10], linestyle=("-", "--", "-.", ":")[k % 4],
                    color=colour, label=label)
            low = [m - s for m, s in zip(curve.mean, curve.std)]
            high = [m + s for m, s in zip(curve.mean, curve.std)]
            ax.fill_between(x, low, high, color=colour, alpha=0.2, linewidth=0)
        ax.set_xticks(range(1, longest + 1))
        ax.set_xlabel("task")
        ax.set_title(col_title(report, report.cols[j]) if report.col_keys else "")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy after the task (%)")
    setting = ", ".join(f"{k}={format_value(v)}" for k, v in report.constants.items())
    lines = textwrap.wrap(setting, width=int(75 * fig.get_figwidth() / 6.4)) + ["mean over seeds, band = ±1 std"]
    fig.suptitle("\n".join(lines), fontsize=10)
    fig.tight_layout()
    out = _save(fig, Path(path))
    plt.close(fig)
    return out


def epoch_series(detail: dict[str, Any]) -> dict[str, Any]:
    """A run's epoch rows laid end to end: x = epochs trained so far in the run, with the
    loss, lr and test accuracy of each, and where each task starts (`show --json`'s epochs)."""
    xs, loss, lr, test, starts = [], [], [], [], {}
    for i, e in enumerate(detail.get("epochs") or []):
        starts.setdefault(e["task"], i)
        xs.append(i)
        loss.append(math.nan if e["loss"] is None else e["loss"])
        lr.append(e["lr"])
        test.append(math.nan if e.get("test_accuracy") is None else e["test_accuracy"])
    return {"x": xs, "loss": loss, "lr": lr, "test": test, "task_starts": starts}


def plot_epochs(details: dict[int, dict[str, Any]], path: Path | str) -> Path:
    """Training loss and learning rate of every epoch of each run, tasks end to end (dotted
    lines where a task starts); test accuracy too when the runs recorded it per epoch."""
    series = {run_id: epoch_series(d) for run_id, d in details.items()}
    series = {run_id: s for run_id, s in series.items() if s["x"]}
    if not series:
        raise ReportError("--plot-epochs: none of the selected runs has epoch rows (runs from before they were "
                          "recorded, or not started)")
    has_test = any(not all(math.isnan(v) for v in s["test"]) for s in series.values())
    plt = _pyplot()
    n_panels = 3 if has_test else 2
    fig, axes = plt.subplots(n_panels, 1, figsize=(9, 2.6 * n_panels + 0.6), sharex=True, squeeze=False)
    axes = axes[:, 0]
    colours = plt.get_cmap("tab10")
    for k, (run_id, s) in enumerate(series.items()):
        d = details[run_id]
        label = f"#{run_id} {d.get('name') or d.get('method')}"
        if (d.get("metrics") or {}).get("partial"):
            label += f" (partial {d['metrics']['tasks_done']}/{d['progress']['n_tasks']})"
        axes[0].plot(s["x"], s["loss"], color=colours(k % 10), linewidth=1, label=label)
        axes[1].plot(s["x"], s["lr"], color=colours(k % 10), linewidth=1)
        if has_test:
            axes[2].plot(s["x"], s["test"], color=colours(k % 10), linewidth=1, marker=".", markersize=2)
        if k == 0:
            for task, start in s["task_starts"].items():
                for ax in axes:
                    ax.axvline(start, color="grey", linestyle=":", linewidth=0.8)
                axes[0].annotate(f"T{task + 1}", (start, 1), xycoords=("data", "axes fraction"), fontsize=7,
                                 va="top", ha="left", color="grey")
    axes[0].set_ylabel("training loss")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("learning rate")
    if has_test:
        axes[2].set_ylabel("test accuracy (%)\n(test-set, per epoch)")
    axes[-1].set_xlabel("epoch (tasks end to end: the stream pass and each memory epoch)")
    axes[0].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("inside each task: mean training loss and learning rate per epoch", fontsize=10)
    fig.tight_layout()
    out = _save(fig, Path(path))
    plt.close(fig)
    return out


def memory_by_task(detail: dict[str, Any]) -> list[dict[str, Any]]:
    """The last memory snapshot of each task, in task order."""
    last: dict[int, dict[str, Any]] = {}
    for snapshot in detail.get("memory", []):
        last[snapshot["task"]] = snapshot
    return [last[t] for t in sorted(last)]


def plot_memory(detail: dict[str, Any], path: Path | str) -> Path:
    """The memory's class histogram after each task of one run (`show --json`'s memory), classes in
    stream order and coloured by the task whose major classes they are."""
    snapshots = memory_by_task(detail)
    if not snapshots:
        raise ReportError(f"--memory-plot: run {detail['id']} has no memory snapshot yet")
    plt = _pyplot()
    n_classes = len(snapshots[0]["histogram"])
    order = detail.get("class_order") or list(range(n_classes))
    names = detail.get("class_names") or [str(c) for c in range(n_classes)]
    class_names = [str(names[order[c]]) if c < len(order) and order[c] < len(names) else str(c)
                   for c in range(n_classes)]
    owner = [0] * n_classes
    for task in detail.get("tasks", []):
        for c in task["major_classes"]:
            if c < n_classes:
                owner[c] = task["task"]
    colours = plt.get_cmap("tab10")
    cfg = detail.get("config") or {}
    title = (f"run {detail['id']}: memory composition after each task — {detail.get('method')} on "
             f"{detail.get('dataset')}, K={cfg.get('memory_size')}, seed {detail.get('seed')}")
    if n_classes <= 20:
        ncols = min(len(snapshots), 5)
        nrows = math.ceil(len(snapshots) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.9 * nrows + 0.6), squeeze=False, sharey=True)
        for ax, snap in zip(axes.flat, snapshots):
            ax.bar(range(n_classes), snap["histogram"], color=[colours(owner[c] % 10) for c in range(n_classes)])
            if snap.get("slots_per_class"):
                ax.axhline(snap["slots_per_class"], color="grey", linestyle=":", linewidth=1)
            ax.set_title(f"after task {snap['task'] + 1}: {sum(snap['histogram'])} samples", fontsize=9)
            ax.set_xticks(range(n_classes))
            ax.set_xticklabels(class_names, rotation=90 if max(map(len, class_names)) > 2 else 0, fontsize=7)
        for ax in axes.flat[len(snapshots):]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("samples in memory")
        handles = [plt.Rectangle((0, 0), 1, 1, color=colours(t % 10)) for t in sorted(set(owner))]
        fig.legend(handles, [f"classes of task {t + 1}" for t in sorted(set(owner))], loc="lower center",
                   ncol=min(len(handles), 5), fontsize=8)
        fig.suptitle(title + "\n(dotted: slots per class)", fontsize=10)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
    else:
        import numpy as np

        grid = np.array([s["histogram"] for s in snapshots])
        fig, ax = plt.subplots(figsize=(10, 1.0 + 0.45 * len(snapshots)))
        image = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
        ax.set_yticks(range(len(snapshots)))
        ax.set_yticklabels([f"after task {s['task'] + 1}" for s in snapshots])
        ax.set_xlabel("class (stream order)")
        fig.colorbar(image, ax=ax, label="samples in memory")
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
    out = _save(fig, Path(path), "--memory-plot")
    plt.close(fig)
    return out


# ---------------------------------------------------------------------- two runs side by side


def _metric_text(detail: dict[str, Any], metric: Any) -> str:
    """A metric of a `show --json` detail: `86.00`, `A@3/5 88.06` when partial (final-only metrics)."""
    value = (detail.get("metrics") or {}).get(metric.name)
    if value is None:
        return "—"
    if (detail.get("metrics") or {}).get("partial") and metric.final_only:
        return f"{metric.letter}@{detail['metrics']['tasks_done']}/{detail['progress']['n_tasks']} {metric.text(value)}"
    return metric.text(value)


def run_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What differs between two runs (`show --json` details): identity, config keys (values as
    `--set` writes them), metrics with B − A (only when both are final, never partial vs final),
    and the accuracy after each task. The same rows feed `rmconsole diff` and the TUI's compare."""
    identity = []
    for key in ("name", "preset", "sweep_id", "status"):
        va, vb = a.get(key), b.get(key)
        if va != vb:
            identity.append((key, format_value(va), format_value(vb)))
    if a.get("tags") != b.get("tags"):
        identity.append(("tags", " ".join(a.get("tags") or []) or "—", " ".join(b.get("tags") or []) or "—"))
    ca, cb = a.get("config") or {}, b.get("config") or {}
    keys = list(dict.fromkeys([*ca, *cb]))
    config = [(k, format_value(config_value(ca, k)), format_value(config_value(cb, k))) for k in keys
              if _hashable(config_value(ca, k)) != _hashable(config_value(cb, k))]
    metrics = []
    notes = []
    final = not (a["metrics"].get("partial") or b["metrics"].get("partial"))
    protocols = {protocol_of(ca), protocol_of(cb)}
    measured = {k for d in (a, b) for k, v in d["metrics"].items() if v is not None}
    for m in metric_registry.listed(protocols | {"task"}, measured):  # the catalogue's, not the loop's clock
        if m.family == "online":
            continue
        va, vb = a["metrics"].get(m.name), b["metrics"].get(m.name)
        delta = f"{vb - va:+.{m.digits}f}" if va is not None and vb is not None and (final or not m.final_only) else ""
        metrics.append((m.name, _metric_text(a, m), _metric_text(b, m), delta))
    if not final:
        notes.append("B − A is left out: a partial run's metrics (@k/T) are not final")
    ta = {t["task"]: t.get("accuracy") for t in a.get("tasks", [])}
    tb = {t["task"]: t.get("accuracy") for t in b.get("tasks", [])}
    tasks = []
    for t in sorted(set(ta) | set(tb)):
        va, vb = ta.get(t), tb.get(t)
        delta = f"{vb - va:+.2f}" if va is not None and vb is not None else ""
        tasks.append((f"acc after T{t + 1}", "—" if va is None else f"{va:.2f}", "—" if vb is None else f"{vb:.2f}",
                      delta))
    return {"a": a["id"], "b": b["id"], "identity": identity, "config": config, "metrics": metrics,
            "tasks": tasks, "notes": notes}


def select(runs: Iterable[dict[str, Any]], where: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Runs whose value of every `where` key is among the given ones (`--where KEY=V1,V2`), by
    the run filter grammar's rule: values read as on the command line, compared as tables
    write them (`augment=none` matches [])."""
    terms = [filter_where(key, values) for key, values in where.items()]
    return [r for r in runs if all(t.matches(lambda key, r=r: key_value(r, key)) for t in terms)]
