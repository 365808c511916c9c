"""Pure drawing functions: store values in, Rich Text out. The widgets only pick sizes and
call these, so what a panel shows is testable without a terminal."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from rich.table import Table
from rich.text import Text

from .. import metric_registry
from ..cl.protocols import protocol_of
from ..numbers import fmt
from ..recency import ClassAccuracyByAge
from .data import MemoryUpdate, RunRow, StreamTask

STATUS_STYLES = {
    "finished": "green",
    "running": "bold cyan",
    "queued": "yellow",
    "failed": "bold red",
    "stopped": "magenta",
}
# Distinct, readable on dark and light backgrounds; classes cycle through them.
CLASS_COLOURS = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
BLOCKS = " ▁▂▃▄▅▆▇█"


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def class_colour(c: int) -> str:
    return CLASS_COLOURS[c % len(CLASS_COLOURS)]


PHASE_SHORT = {"memory update": "mem update", "evaluation": "eval"}


def progress_text(row: RunRow) -> Text:
    """`3/5 memory  60%` (task, phase, phase progress) for an active run; `5/5 tasks` once it ended."""
    if row.active and row.task is not None:
        text = Text(f"{row.task + 1}/{row.n_tasks} ")
        text.append(PHASE_SHORT.get(row.phase or "", row.phase or ""), style="cyan")
        if row.phase_fraction is not None:
            text.append(f" {row.phase_fraction:4.0%}")
        return text
    if row.status == "queued":
        return Text("waiting", style="dim")
    if row.status == "running" and row.task is None:
        return Text("starting", style="dim")
    if row.n_tasks:
        return Text(f"{row.tasks_done}/{row.n_tasks} tasks", style="dim" if row.tasks_done < row.n_tasks else "")
    return Text("")


def bar(fraction: float, width: int, style: str = "cyan", empty_style: str = "grey23") -> Text:
    """A one-line progress bar with eighth-block resolution."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = int(round(fraction * width * 8))
    full, part = divmod(eighths, 8)
    text = Text("█" * full, style=style)
    if full < width:
        text.append("▏▎▍▌▋▊▉"[part - 1] if part else " ", style=f"{style} on {empty_style}")
        text.append(" " * (width - full - 1), style=f"on {empty_style}")
    return text


# --------------------------------------------------------------------------- task stream


def stream_counts(task: StreamTask, labels: Sequence[str], wide: bool = True) -> Text:
    """`5:131 6:133 +24 minor (8 cls)`: the major classes with their sample counts, then the
    blurry samples of other classes. (Cached: a task's plan never changes.)"""
    return _stream_counts(task, tuple(labels), wide).copy()


@lru_cache(maxsize=4096)
def _stream_counts(task: StreamTask, labels: tuple[str, ...], wide: bool) -> Text:
    text = Text()
    for c in task.major_classes:
        if c < len(task.composition):
            text.append(f"{labels[c] if c < len(labels) else c}", style=f"bold {class_colour(c)}")
            text.append(f":{task.composition[c]} ")
    minor = task.n_samples - sum(task.composition[c] for c in task.major_classes if c < len(task.composition))
    text.append(f"+{minor} minor", style="grey62")
    n_minor_classes = sum(1 for c, n in enumerate(task.composition) if n and c not in task.major_classes)
    if wide and n_minor_classes:
        text.append(f" ({n_minor_classes} cls)", style="grey50")
    if task.first_appearances:  # task-free streams: the classes that arrive for the first time here
        text.append(f" ★{len(task.first_appearances)} new", style="bold yellow")
        if wide:
            shown = [f"{labels[c] if c < len(labels) else c}@{p + 1}" for c, p in task.first_appearances[:3]]
            more = "…" if len(task.first_appearances) > 3 else ""
            text.append(f" ({' '.join(shown)}{more})", style="yellow")
    return text


def stream_bar(task: StreamTask, bar_width: int, scale: int, state: str, position: float | None = None) -> Text:
    """One task of the stream as a stacked bar of its classes: each major class in its own
    colour, all minor (blurry) samples as one grey segment.

    `scale` is the largest task's sample count (so bar lengths compare across tasks); `state`
    is done / current / planned; `position` (0..1) shades what the current task has not yet
    streamed."""
    width = max(1, round(bar_width * task.n_samples / max(scale, 1)))
    majors = [(c, task.composition[c]) for c in task.major_classes if c < len(task.composition)]
    minor = task.n_samples - sum(n for _, n in majors)
    segments = [(class_colour(c), n) for c, n in majors] + [("grey50", minor)]
    # widths by largest remainder so they add up to `width`
    exact = [n / max(task.n_samples, 1) * width for _, n in segments]
    cells = [int(e) for e in exact]
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - cells[i], reverse=True)[: width - sum(cells)]:
        cells[i] += 1
    reached = width if position is None else int(round(position * width))
    text = Text()
    drawn = 0
    for (colour, _), n_cells in zip(segments, cells):
        style = colour if state != "planned" else f"{colour} dim"
        full = min(max(reached - drawn, 0), n_cells)  # one span per run of equal cells, not per cell
        if full:
            text.append("█" * full, style=style)
        if n_cells - full:
            text.append("░" * (n_cells - full), style=style)
        drawn += n_cells
    text.append(" " * (bar_width - width))
    return text


# --------------------------------------------------------------------------- memory


def _column_cell(value: float, row: int, scale: float) -> str:
    """The block character of a bar of height `value` (data units) in chart row `row` (0 = bottom)."""
    level = value * scale - row  # how much of this cell is filled, in cells
    if level >= 1:
        return "█"
    if level <= 0:
        return " "
    return BLOCKS[max(1, int(level * 8))]


def memory_chart(update: MemoryUpdate, labels: Sequence[str], width: int, height: int) -> Text:
    """The memory's class histogram as columns against the per-class slot count (a dashed
    line): columns above the line are classes holding more than their share (they will give
    samples up as new classes arrive); below it, classes short of their share. With more
    classes than columns fit, each column is the mean of a group of classes."""
    hist = list(update.histogram)
    n = len(hist)
    axis = len(str(max(hist + [update.slots_per_class]))) + 1
    room = max(width - axis, 1)
    group = max(1, math.ceil(n / room))
    values = [sum(hist[i : i + group]) / len(hist[i : i + group]) for i in range(0, n, group)]
    cols = len(values)
    col_w = max(1, min(5, room // cols - (1 if room // cols > 2 else 0)))
    gap = 1 if room // cols > 2 else 0
    top = max(max(values), update.slots_per_class, 1)
    height = max(height, 2)
    scale = height / top
    slot_row = min(int(update.slots_per_class * scale - 1e-9), height - 1)
    lines = Text()
    for r in range(height - 1, -1, -1):
        label = str(update.slots_per_class) if r == slot_row else str(int(round(top))) if r == height - 1 else ""
        lines.append(f"{label:>{axis - 1}}", style="grey62")
        lines.append("┤" if label else "│", style="grey42")
        for i, v in enumerate(values):
            cell = _column_cell(v, r, scale)
            c = i * group
            colour = class_colour(c) if group == 1 else "cyan"
            if cell == " " and r == slot_row:
                lines.append("╌" * col_w, style="yellow")
            else:
                lines.append(cell * col_w, style=colour)
            if gap:
                lines.append("╌" if r == slot_row else " ", style="yellow")
        lines.append("\n")
    lines.append(" " * axis)
    if group == 1:
        for i in range(cols):
            lines.append(f"{labels[i] if i < len(labels) else i:^{col_w}.{col_w}}" + " " * gap, style=class_colour(i))
    else:
        lines.append(f"each column: mean of {group} classes", style="grey62")
    return lines


def memory_summary(update: MemoryUpdate, index: int, total: int, follow: bool) -> Text:
    at_share = sum(1 for v in update.histogram if v == update.slots_per_class)
    seen = sum(1 for v in update.histogram if v)
    text = Text()
    text.append(f"update {index + 1}/{total}", style="bold")
    text.append(f" · after task {update.task + 1}" + (" · latest" if follow else " · pinned"), style="grey62")
    if update.policy:
        text.append(f" · {update.policy}", style="cyan")
    text.append(f"\n{update.size} samples · {update.slots_per_class} slots/class · {at_share}/{seen} at share")
    if update.note:
        text.append(f"\n{update.note}", style="grey62")
    return text


def class_accuracy_text(split: ClassAccuracyByAge, width: int) -> Text:
    """Each class's accuracy after the task beside its memory slots, old classes apart from the
    ones that task introduced (rmconsole.recency), in three lines: `acc after T3: old 62.5% (4
    cls) · new 95.8% (2) · new−old +33.3`, then `old 5:98(33) 6:97(33) …` and `new 0:95(33) …`
    (class:accuracy%(slots)), cut with `+N` where the panel has no room. A large positive gap
    is recency bias: the model favours the classes it saw last."""
    text = Text()
    text.append(f"after T{split.task + 1} ", style="bold")
    text.append("class:acc%(slots) ", style="grey50")
    text.append(
        f"old {fmt(split.old_mean, 1)}% ({len(split.old)}) · new {fmt(split.new_mean, 1)}% ({len(split.new)})",
        style="grey70",
    )
    if split.gap is not None:
        text.append(f" · new−old {split.gap:+.1f}", style="bold yellow" if split.gap > 10 else "grey70")
    for name, lines in (("old", split.old), ("new", split.new)):
        text.append(f"\n{name} ", style="bold")
        if not lines:
            text.append("—", style="grey50")
        used = 4
        for i, c in enumerate(lines):
            item = f"{c.label}:{fmt(c.accuracy, 0)}" + (f"({c.slots})" if c.slots is not None else "")
            more = len(lines) - i
            if i and used + len(item) + 1 > width - (len(f"+{more}") + 1 if more > 1 else 0):
                text.append(f"+{more}", style="grey50")
                break
            text.append(item, style=class_colour(c.index))
            text.append(" ")
            used += len(item) + 1
    return text


def _hist_mean_std(hist: Sequence[int]) -> tuple[float, float]:
    n = sum(hist)
    if not n:
        return 0.0, 0.0
    bins = len(hist) - 1 or 1
    mean = sum(i / bins * h for i, h in enumerate(hist)) / n
    var = sum((i / bins - mean) ** 2 * h for i, h in enumerate(hist)) / n
    return mean, math.sqrt(var)


def uncertainty_chart(update: MemoryUpdate, width: int, height: int = 3) -> Text:
    """RM's spread as shares: for each vote bin (u = 0 certain … 1 uncertain) the share of the
    candidates (grey) beside the share of the chosen samples (magenta), each histogram scaled
    to its own total, so that a memory of 500 drawn from 12,500 candidates is as visible as the
    candidates; RM's step sampling should pick across the whole range (the two shapes alike),
    not only the certain end."""
    cand = list(update.candidates_uncertainty or ())
    chosen = list(update.chosen_uncertainty or ())
    if not cand:
        return Text("uncertainty: not recorded for this update", style="grey62")
    cm, cs = _hist_mean_std(cand)
    km, ks = _hist_mean_std(chosen)
    bins = len(cand)
    chosen = chosen + [0] * (bins - len(chosen))
    cand_share = [c / (sum(cand) or 1) for c in cand]
    chosen_share = [k / (sum(chosen) or 1) for k in chosen]
    text = Text()
    text.append("u shares ", style="bold")
    text.append("■ chosen", style="bold magenta")
    text.append(f" {sum(chosen)} {km:.2f}±{ks:.2f}  ")
    text.append("■ candidates", style="grey62")
    text.append(f" {sum(cand)} {cm:.2f}±{cs:.2f}\n")
    col_w = max(1, min(2, ((width - 2) // bins - 1) // 2))
    top = max(max(cand_share), max(chosen_share)) or 1.0
    scale = height / top
    for r in range(height - 1, -1, -1):
        text.append("  ")
        for c, k in zip(cand_share, chosen_share):
            text.append(_column_cell(c, r, scale) * col_w, style="grey62")
            text.append(_column_cell(k, r, scale) * col_w, style="bold magenta")
            text.append(" ")
        text.append("\n")
    span = bins * (2 * col_w + 1) - 1
    views = f"{update.views} views" if update.views else ""
    middle = max(1, span - len("certain") - len("uncertain"))
    views = views if len(views) + 2 <= middle else ""
    text.append("  certain" + f"{views:^{middle}}" + "uncertain", style="grey62")
    return text


# --------------------------------------------------------------------------- accuracy


def heat(value: float | None) -> str:
    """Red (0 %) to green (100 %) for the accuracy matrix."""
    if value is None:
        return "grey42"
    v = min(max(value / 100, 0.0), 1.0)
    r, g = int(230 - 150 * v), int(80 + 140 * v)
    return f"rgb({r},{g},90)"


def accuracy_matrix(
    matrix: Sequence[Sequence[float | None]], accuracies: Sequence[float | None], n_tasks: int, max_rows: int = 12
) -> Table | Text:
    """acc[k][j]: accuracy on task j's classes after task k, with the overall accuracy per row.
    Up to 10 tasks as numbers; beyond, a heat map of one coloured block per cell. Only the
    last `max_rows` rows are drawn (the panel is small; the CLI's `show` prints them all)."""
    first = max(0, len(matrix) - max_rows)
    if n_tasks > 10:
        text = Text()
        text.append("after  " + "".join(str((j + 1) % 10) for j in range(n_tasks)) + "  all\n", style="bold")
        if first:
            text.append(f"  … {first} earlier rows\n", style="grey50")
        for k in range(first, len(matrix)):
            text.append(f"T{k + 1:<4} ", style="grey62")
            for v in list(matrix[k]) + [None] * (n_tasks - len(matrix[k])):
                text.append("█" if v is not None else "·", style=heat(v) if v is not None else "grey35")
            text.append(f" {fmt(accuracies[k], 1):>5}", style="bold")
            text.append("\n")
        return text
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    table.add_column("after", justify="right", style="grey62")
    for j in range(n_tasks):
        table.add_column(f"T{j + 1}", justify="right")
    table.add_column("all", justify="right", style="bold")
    for k in range(first, len(matrix)):
        row = matrix[k]
        cells = [Text(fmt(v, 1), style=heat(v)) for v in list(row) + [None] * (n_tasks - len(row))]
        table.add_row(f"T{k + 1}", *cells, fmt(accuracies[k], 1))
    for k in range(len(matrix), min(n_tasks, first + max_rows)):
        table.add_row(f"T{k + 1}", *[Text("·", style="grey35")] * n_tasks, "")
    return table


def metrics_line(row: RunRow) -> Text:
    """The run's metrics (those the catalogue lists for its protocol, and any other it measured;
    a task-free run's A_auc first); a partial run's final-only figures with their `@k/T` mark
    (never bare: a number after task 3 of 5 is not the run's result); a cross-run metric
    (I_last) marked `*` (with the note below) when the run it was measured against differs
    beyond its rule; the top-k figures when the run measured them; and the paper's figure for
    each metric the paper prints for this method and dataset (rmconsole.paper.paper_comparison):
    with a Δ only when the run is the paper's protocol and complete, else with the keys that
    differ (or the partial mark) named instead."""
    from .. import paper

    text = Text()
    protocols = [protocol_of(row.config)]
    for m in metric_registry.listed(protocols, row.metrics, family=""):
        text.append(f"{m.name} ", style="grey62")
        marked = row.partial and m.final_only and row.value(m.name) is not None
        text.append(
            row.metric_text(m.name, mark=True),
            style="grey50" if marked else "bold" if "task" in m.protocols else "bold cyan",
        )
        text.append("   ")
        if m.across is not None and row.value(m.name) is None and row.tasks_done:
            text.append(f"({m.name}: {m.why_none(protocols[0])})", style="grey50")
    if row.partial:
        text.append(f"(@{row.progress_mark}: after task {row.tasks_done} of {row.n_tasks}, not final)", style="grey50")
    if row.topk:
        figures = metric_registry.listed(protocols, row.metrics, family="topk")
        text.append(f"\ntop-{row.topk} ", style="grey62")
        text.append(
            "  ".join(f"{m.label.removesuffix(' top-k')} {row.metric_text(m.name, mark=True)}" for m in figures),
            style="bold",
        )
    compute = metric_registry.listed(protocols, row.metrics, family="compute")  # TFLOP, memory bytes (issue 40)
    if compute:
        text.append("\ncompute ", style="grey62")
        text.append("  ".join(f"{m.label} {row.metric_text(m.name, mark=False)}" for m in compute), style="bold")
    found = [
        (m, row.value(m.name), paper.paper_comparison(row.config, m.name))
        for m in metric_registry.catalogue()
        if m.paper
    ]
    shown = [(m, value, c) for m, value, c in found if c is not None]
    if shown:
        text.append("\npaper ", style="grey62")
        for m, value, comparison in shown:
            figure = comparison.figure
            text.append(f"{m.label.replace(' top-k', f' top-{figure.topk}')} {figure.mean:.2f}", style="bold")
            if value is not None and comparison.matches and not row.partial:
                text.append(f" (Δ {value - figure.mean:+.2f})", style="grey62")
            text.append("   ")
        first = shown[0][2]
        text.append(f"table {first.figure.tex_order} ({first.figure.label})", style="grey50")
        if not first.matches:
            text.append(f"\nno Δ: not the paper's protocol ({first.differs_text()})", style="yellow")
        elif row.partial:
            text.append(f"\nno Δ: partial (@{row.progress_mark})", style="yellow")
    if row.i_last_note:
        text.append(f"\n* I_last {row.i_last_note}", style="grey50")
    return text
