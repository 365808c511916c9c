"""The runs table: one keyed row per run, updated cell by cell so the cursor stays on its run."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.reactive import var
from textual.widgets import DataTable

from ... import metric_registry
from ...cl.metric_catalog import mark_carrier
from ..data import RunRow, sort_columns
from ..render import progress_text, status_text
from . import css_beside

# key, label, width, justify, priority (1 = always shown; the higher, the sooner it is dropped on a
# narrow terminal: the id and A_last stay, the run's name/preset is narrowed but its start kept).
# The metric columns are the catalogue's (its `column` priority; the one carrying `@k/T` is wider).
RUN_COLUMNS: tuple[tuple[str, str, int, str, int], ...] = (
    ("sel", " ", 1, "left", 1), ("id", "id", 4, "right", 1), ("status", "status", 8, "left", 1),
    ("preset", "run", 22, "left", 1), ("method", "method", 8, "left", 3), ("K", "K", 4, "right", 7),
    ("seed", "seed", 4, "right", 6), ("changes", "changes", 10, "left", 4), ("progress", "progress", 16, "left", 2),
    ("speed", "samples/s", 9, "right", 9),
)
METRICS = tuple(metric_registry.columns())
CARRIER = mark_carrier(METRICS)
COLUMNS: tuple[tuple[str, str, int, str, int], ...] = RUN_COLUMNS + tuple(
    (m.name, m.label, 10 if m is CARRIER else max(6, len(m.label)), "right", m.column) for m in METRICS)
TASK_FREE_ONLY = frozenset(m.name for m in METRICS if "task" not in m.protocols)  # shown when such a run is listed
MAX_RUN_WIDTH = 40  # a longer run name is cut with an ellipsis (a preset name never is: they are shorter)


def layout(width: int, run_width: int = 22, anytime: bool = False) -> dict[str, int]:
    """The columns that fit `width` cells, by priority, with their widths. The run column (name,
    else preset) is as wide as its longest label (up to MAX_RUN_WIDTH), so a preset name a user
    types is never cut; the least important columns are dropped until the rest fit (each costs
    its width + 2 of padding); what is left over widens the run column. `anytime`: a task-free
    run is listed, so the A_auc column is wanted (a store of the RM paper's runs never shows it)."""
    run_width = max(6, min(run_width, MAX_RUN_WIDTH))
    kept = [c for c in COLUMNS if anytime or c[0] not in TASK_FREE_ONLY]

    def need(cols: list[tuple[str, str, int, str, int]]) -> int:
        return sum((run_width if c[0] == "preset" else c[2]) + 2 for c in cols) + 2  # + the scrollbar

    while need(kept) > width and max(c[4] for c in kept) > 1:
        worst = max(c[4] for c in kept)
        kept.remove(next(c for c in reversed(kept) if c[4] == worst))
    widths = {c[0]: c[2] for c in kept}
    widths["preset"] = run_width
    spare = max(width - need(kept), 0)
    grow = "changes" if "changes" in widths else "preset"  # what is left over goes to the overrides and tags
    widths[grow] += min(spare, 40 - widths[grow]) if widths[grow] < 40 else 0
    return widths


FIRST_BATCH, ADD_BATCH = 60, 300  # new rows per repaint: a big store's first screenful appears at once

SORTABLE = {c[0]: c[0] for c in COLUMNS if c[0] in sort_columns()}  # a click on its header sorts by it


def _signature(cell: object) -> tuple[object, ...]:
    """What a cell looks like (Rich's Text equality ignores the base style)."""
    if isinstance(cell, Text):
        return (cell.plain, str(cell.style), tuple(cell.spans))
    return (cell,)


class RunsTable(DataTable):
    """Rows are keyed by run id. Setting `runs` (in display order) or `selected_ids` adds,
    removes and updates only the rows and cells that changed and then puts the cursor back on
    the run it was on, wherever that run now sits. `sorted_by` marks the sort in the header."""

    DEFAULT_CSS = css_beside(__file__)

    runs: var[tuple[RunRow, ...]] = var((), init=False)
    selected_ids: var[frozenset[int]] = var(frozenset(), init=False)
    sorted_by: var[tuple[str, bool]] = var(("id", True), init=False)  # (column, descending)

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._cells: dict[str, tuple[tuple[object, ...], ...]] = {}
        self._shown: dict[str, tuple[RunRow, bool]] = {}
        self._sync_pending = False
        self._widths: dict[str, int] = {}
        self._keep: Optional[int] = None  # the run the cursor was on before the columns were rebuilt

    def on_mount(self) -> None:
        self._layout(self.size.width or 120)

    def on_resize(self) -> None:
        self._relayout()

    def _anytime(self) -> bool:
        """A run with a task-free-only metric (A_auc) is listed."""
        return any(name in r.metrics for r in self.runs for name in TASK_FREE_ONLY)

    def _run_width(self) -> int:
        return max((len(r.label) for r in self.runs), default=8)

    def _relayout(self) -> None:
        if self.size.width and layout(self.size.width, self._run_width(), self._anytime()) != self._widths:
            self._layout(self.size.width)

    def _layout(self, width: int) -> None:
        """(Re)build the columns for this width: everything is drawn again from `runs`."""
        self._widths = layout(width, self._run_width(), self._anytime())
        keep = self.cursor_run_id
        self.clear(columns=True)
        self._cells.clear()
        self._shown.clear()
        for key, label, _, justify, _ in COLUMNS:
            if key in self._widths:
                self.add_column(Text(label, justify=justify), width=self._widths[key], key=key)  # type: ignore[arg-type]  # COLUMNS' justify: "left"/"right"
        self.watch_sorted_by()
        self._keep = keep
        self._sync()

    @property
    def cursor_run_id(self) -> Optional[int]:
        if not self.row_count:
            return None
        try:
            return int(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value or 0)
        except Exception:  # noqa: BLE001 - no valid cursor row
            return None

    def row_cells(self, row: RunRow, selected: bool) -> tuple[object, ...]:
        """The cells of the columns shown at this width, in order."""
        speed = f"{row.samples_per_s:,.0f}" if row.active and row.samples_per_s else ""
        partial = "grey50" if row.partial else ""
        changes = Text(row.overrides_text, style="yellow", overflow="ellipsis", no_wrap=True)
        if row.tags:
            changes.append((" " if row.overrides_text else "") + " ".join(f"#{t}" for t in row.tags), style="cyan")
        label = Text(row.label, overflow="ellipsis", no_wrap=True, style="bold" if row.name else "")
        if row.archived:
            label.stylize("dim")
        cells = {
            "sel": Text("●", style="bold yellow") if selected else Text(" "),
            "id": Text(str(row.id), justify="right"),
            "status": status_text(row.status),
            "preset": label,
            "method": Text(row.method),
            "K": Text(str(row.memory_size if row.memory_size is not None else "—"), justify="right"),
            "seed": Text(str(row.seed), justify="right"),
            "changes": changes,
            "progress": progress_text(row),
            "speed": Text(speed, justify="right"),
        }
        for m in METRICS:  # the @k/T column bold, a task-free one cyan, the others grey when partial
            has = row.value(m.name) is not None
            if m is CARRIER:
                style = partial or ("bold" if has else "grey50")
            elif m.name in TASK_FREE_ONLY:
                style = "bold cyan" if has else "grey50"
            else:
                style = partial if m.final_only and m.across is None else ""
            cells[m.name] = Text(row.metric_text(m.name, mark=m is CARRIER), justify="right", style=style)
        return tuple(cells[key] for key, *_ in COLUMNS if key in self._widths)

    def watch_runs(self) -> None:
        if self.is_mounted and self.size.width and layout(self.size.width, self._run_width(), self._anytime()) != self._widths:
            self._layout(self.size.width)  # (a longer run label arrived: it syncs too)
            return
        self._sync()

    def watch_selected_ids(self) -> None:
        self._sync()

    def _sync(self) -> None:
        """Make the table show `runs` in this order, touching only rows and cells that changed.

        At most FIRST_BATCH (then ADD_BATCH) new rows are added per call, first rows first, so a
        big store shows its first screenful at once (DataTable measures every new cell); the rest
        follow after each repaint."""
        self._sync_pending = False
        keep = self.cursor_run_id if self._keep is None else self._keep
        self._keep = None
        wanted = {str(r.id): r for r in self.runs}
        for key in [k for k in self._cells if k not in wanted]:
            self.remove_row(key)
            del self._cells[key], self._shown[key]
        column_keys = [c[0] for c in COLUMNS if c[0] in self._widths]
        added, limit = 0, ADD_BATCH if self._cells else FIRST_BATCH
        pending = False
        for key, row in wanted.items():
            state = (row, row.id in self.selected_ids)
            if self._shown.get(key) == state:
                continue  # the same run, drawn the same: nothing to build
            old = self._cells.get(key)
            if old is None and added >= limit:
                pending = True
                continue
            self._shown[key] = state
            cells = self.row_cells(*state)
            signature = tuple(_signature(c) for c in cells)
            if old is None:
                self.add_row(*cells, key=key)
                added += 1
            elif old != signature:
                for column, cell, new, was in zip(column_keys, cells, signature, old):
                    if new != was:
                        self.update_cell(key, column, cell)
            self._cells[key] = signature
        order = [k for k in wanted if k in self._cells]
        if [row.key.value for row in self.ordered_rows] != order:
            rank = {k: i for i, k in enumerate(order)}
            self.sort("id", key=lambda cell: rank[cell.plain])
        if keep is not None and str(keep) in self._cells:
            self.move_cursor(row=self.get_row_index(str(keep)), scroll=False)
        if pending and not self._sync_pending:
            self._sync_pending = True
            self.call_after_refresh(self._sync)  # a big store: the rest after this frame

    def watch_sorted_by(self) -> None:
        """Show the sort column and direction in the header."""
        column, descending = self.sorted_by
        for key, label, _, justify, _ in COLUMNS:
            if key not in self._widths:
                continue
            text = Text(label, justify=justify)  # type: ignore[arg-type]  # COLUMNS' justify: "left"/"right"
            if key == column:
                text.append(" ▼" if descending else " ▲", style="bold")
            self.columns[key].label = text  # type: ignore[index]  # a ColumnKey hashes and compares as its str
        self.refresh()
