"""The runs table: one keyed row per run, updated cell by cell so the cursor stays on its run."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.reactive import var
from textual.widgets import DataTable

from ..data import RunRow
from ..render import fmt, progress_text, status_text
from . import css_beside

# key, label, width, justify
COLUMNS: tuple[tuple[str, str, int, str], ...] = (
    ("sel", " ", 1, "left"), ("id", "id", 4, "right"), ("status", "status", 8, "left"),
    ("preset", "preset", 17, "left"), ("method", "method", 8, "left"), ("K", "K", 5, "right"),
    ("seed", "seed", 4, "right"), ("progress", "progress", 19, "left"), ("speed", "samples/s", 9, "right"),
    ("A_last", "A_last", 6, "right"), ("F_last", "F_last", 6, "right"), ("I_last", "I_last", 6, "right"),
)
ANYTIME_COLUMN = "A_auc"  # shown once a task-free run is listed
FIRST_BATCH, ADD_BATCH = 60, 300  # new rows per repaint: a big store's first screenful appears at once

SORTABLE = {"id": "id", "status": "status", "preset": "preset", "method": "method", "A_last": "A_last",
            "F_last": "F_last"}


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

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._cells: dict[str, tuple[tuple[object, ...], ...]] = {}
        self._shown: dict[str, tuple[RunRow, bool]] = {}
        self._sync_pending = False

    def on_mount(self) -> None:
        for key, label, width, justify in COLUMNS:
            self.add_column(Text(label, justify=justify), width=width, key=key)  # type: ignore[arg-type]
        self.watch_sorted_by()

    @property
    def cursor_run_id(self) -> Optional[int]:
        if not self.row_count:
            return None
        try:
            return int(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value or 0)
        except Exception:  # noqa: BLE001 - no valid cursor row
            return None

    def row_cells(self, row: RunRow, selected: bool) -> tuple[object, ...]:
        speed = f"{row.samples_per_s:,.0f}" if row.active and row.samples_per_s else ""
        return (
            Text("●", style="bold yellow") if selected else Text(" "),
            Text(str(row.id), justify="right"),
            status_text(row.status),
            Text(row.preset or "—", overflow="ellipsis", no_wrap=True),
            Text(row.method),
            Text(str(row.memory_size if row.memory_size is not None else "—"), justify="right"),
            Text(str(row.seed), justify="right"),
            progress_text(row),
            Text(speed, justify="right"),
            Text(fmt(row.a_last), justify="right", style="bold" if row.a_last is not None else "grey50"),
            Text(fmt(row.f_last), justify="right"),
            Text(fmt(row.i_last), justify="right"),
        ) + ((Text(fmt(row.a_auc), justify="right", style="bold cyan" if row.a_auc is not None else "grey50"),)
             if ANYTIME_COLUMN in self.columns else ())

    def _anytime_column(self) -> None:
        """Task-free runs listed: an A_auc column (added once, at the end; a store of the RM
        paper's runs only keeps the table it always had)."""
        if ANYTIME_COLUMN in self.columns or not any(r.a_auc is not None for r in self.runs):
            return
        self.add_column(Text("A_auc", justify="right"), width=6, key=ANYTIME_COLUMN)
        self._shown = {}  # every row is drawn again, now with its A_auc cell
        self._cells = {k: v + ((None,),) for k, v in self._cells.items()}

    def watch_runs(self) -> None:
        self._sync()

    def watch_selected_ids(self) -> None:
        self._sync()

    def _sync(self) -> None:
        """Make the table show `runs` in this order, touching only rows and cells that changed.

        At most FIRST_BATCH (then ADD_BATCH) new rows are added per call, first rows first, so a
        big store shows its first screenful at once (DataTable measures every new cell); the rest
        follow after each repaint."""
        self._sync_pending = False
        self._anytime_column()
        keep = self.cursor_run_id
        wanted = {str(r.id): r for r in self.runs}
        for key in [k for k in self._cells if k not in wanted]:
            self.remove_row(key)
            del self._cells[key], self._shown[key]
        column_keys = [c[0] for c in COLUMNS] + ([ANYTIME_COLUMN] if ANYTIME_COLUMN in self.columns else [])
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
        for key, label, _, justify in COLUMNS:
            text = Text(label, justify=justify)  # type: ignore[arg-type]
            if key == column:
                text.append(" ▼" if descending else " ▲", style="bold")
            self.columns[key].label = text  # type: ignore[index]
        self.refresh()
