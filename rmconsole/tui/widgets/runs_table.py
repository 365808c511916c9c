"""The runs table: one keyed row per run, updated cell by cell so the cursor stays on its run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, cast

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text
from textual.reactive import var
from textual.widgets import DataTable
from textual.widgets.data_table import DuplicateKey, Row, RowKey

from ... import metric_registry
from ...cl.metric_catalog import column_when_measured, mark_carrier
from ..data import RunRow, sort_columns
from ..render import progress_text, status_text
from . import css_beside

# key, label, width, justify, priority (1 = always shown; the higher, the sooner it is dropped on a
# narrow terminal: the id and A_last stay, the run's name/preset is narrowed but its start kept).
# The metric columns are the catalogue's (its `column` priority; the one carrying `@k/T` is wider).
RUN_COLUMNS: tuple[tuple[str, str, int, str, int], ...] = (
    ("sel", " ", 1, "left", 1),
    ("id", "id", 4, "right", 1),
    ("status", "status", 8, "left", 1),
    ("preset", "run", 22, "left", 1),
    ("method", "method", 8, "left", 3),
    ("K", "K", 4, "right", 7),
    ("seed", "seed", 4, "right", 6),
    ("changes", "changes", 10, "left", 4),
    ("progress", "progress", 16, "left", 2),
    ("speed", "samples/s", 9, "right", 9),
)
METRICS = tuple(metric_registry.columns())
CARRIER = mark_carrier(METRICS)
COLUMNS: tuple[tuple[str, str, int, str, int], ...] = RUN_COLUMNS + tuple(
    (m.name, m.label, 10 if m is CARRIER else max(6, len(m.label)), "right", m.column) for m in METRICS
)
RUN_KEYS = frozenset(c[0] for c in RUN_COLUMNS)
TASK_FREE_ONLY = frozenset(m.name for m in METRICS if "task" not in m.protocols)  # shown when such a run is listed
# the other columns shown only while a listed run has them (the validation figures of a `tune` trial)
WHEN_MEASURED = tuple(m.name for m in METRICS if column_when_measured(m) and m.name not in TASK_FREE_ONLY)
MAX_RUN_WIDTH = 40  # a longer run name is cut with an ellipsis (a preset name never is: they are shorter)

# Below COMPACT_WIDTH (an 80-column terminal) the identifying columns fold into fewer, so that
# what tells runs apart still shows: selection in the id, a live run's progress in its status,
# the overrides and tags after the run's name, method · K · seed in one column, and A/F/I_last
# with one decimal (a partial one keeps its `@k/T` or is grey). F_last and I_last are left out
# only while no listed run has one.
COMPACT_WIDTH = 100
COMPACT_COLUMNS: tuple[tuple[str, str, int, str, int], ...] = (
    ("id", "id", 5, "right", 1),
    ("status", "status", 9, "left", 1),
    ("preset", "run · changes", 13, "left", 1),
    ("method", "method·K·seed", 15, "left", 1),
)
COMPACT_METRICS = ("A_last", "F_last", "I_last")
# of those shown when measured, what the folded columns keep too: the runs table's foremost (A_last (val))
COMPACT_MEASURED = tuple(m.name for m in sorted(METRICS, key=lambda m: m.column) if m.name in WHEN_MEASURED)[:1]
# what `s` and the sort mark call each sort key: the column's header
SORT_LABELS = {"preset": "run"}


def layout(
    width: int, run_width: int = 22, anytime: bool = False, present: frozenset[str] = frozenset(COMPACT_METRICS)
) -> dict[str, int]:
    """The columns that fit `width` cells, by priority, with their widths. The run column (name,
    else preset) is as wide as its longest label (up to MAX_RUN_WIDTH), so a preset name a user
    types is never cut; the least important columns are dropped until the rest fit (each costs
    its width + 2 of padding); what is left over widens the run column. `anytime`: a task-free
    run is listed, so the A_auc column is wanted (a store of the RM paper's runs never shows it)."""
    run_width = max(6, min(run_width, MAX_RUN_WIDTH))
    if width < COMPACT_WIDTH:
        return compact_layout(width, anytime, present, run_width)
    kept = [
        c for c in COLUMNS if (anytime or c[0] not in TASK_FREE_ONLY) and (c[0] not in WHEN_MEASURED or c[0] in present)
    ]

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


def compact_layout(
    width: int, anytime: bool = False, present: frozenset[str] = frozenset(COMPACT_METRICS), run_width: int = 8
) -> dict[str, int]:
    """The folded columns of a narrow terminal (COMPACT_COLUMNS and A/F/I_last, A_auc too for a
    task-free run, A_last (val) for a validated one), `present`: the metrics some listed run has
    (the others are left out); the run column takes what is left (at least 8), and at least
    `run_width` (the longest name or preset, up to MAX_RUN_WIDTH: never cut, docs/tui.md): to make
    room, method·K·seed and the status narrow to their headers' and `finished`'s widths, then
    I_last and F_last leave."""
    widths = {key: w for key, _, w, _, _ in COMPACT_COLUMNS}
    metrics = [
        m
        for m in METRICS
        if (m.name in COMPACT_METRICS or m.name in COMPACT_MEASURED) and (m.name == "A_last" or m.name in present)
    ]
    if anytime:
        metrics += [m for m in METRICS if m.name in TASK_FREE_ONLY]
    for m in metrics:
        widths[m.name] = 9 if m is CARRIER else max(5, len(m.label))
    used = sum(w + 2 for w in widths.values()) + 2 + 2  # + the scrollbar and the border
    widths["preset"] = max(8, widths["preset"] + width - used + 2)  # (the scrollbar's 2 cells only with many runs)
    short = min(run_width, MAX_RUN_WIDTH) + 1 - widths["preset"]  # (+ 1: an ellipsis cuts the changes, not the name)
    for column, least in (("method", len("method·K·seed")), ("status", len("finished"))):
        give = max(0, min(short, widths[column] - least))
        widths[column] -= give
        widths["preset"] += give
        short -= give
    for name in ("I_last", "F_last"):
        if short > 0 and name in widths:
            freed = widths.pop(name) + 2
            widths["preset"] += freed
            short -= freed
    return widths


# new rows per repaint: a big store's first screenful appears at once, the rest in a few frames
# (a new row costs little: its cells are built only when it is first drawn, _LazyRow)
FIRST_BATCH, ADD_BATCH = 60, 2500

SORTABLE = {c[0]: c[0] for c in COLUMNS if c[0] in sort_columns()}  # a click on its header sorts by it


def _signature(cell: object) -> tuple[object, ...]:
    """What a cell looks like (Rich's Text equality ignores the base style)."""
    if isinstance(cell, Text):
        return (cell.plain, str(cell.style), tuple(cell.spans))
    return (cell,)


class _LazyRow:
    """A row added before it was ever drawn: its cells are built the first time one of them is
    rendered or read (DataTable renders only the rows on screen), so adding 10,000 rows costs a
    small object per cell rather than 18 Rich Texts and their signatures per row."""

    __slots__ = ("cells", "state", "table")

    def __init__(self, table: RunsTable, state: tuple[RunRow, bool]) -> None:
        self.table, self.state = table, state
        self.cells: tuple[object, ...] | None = None

    def cell(self, index: int) -> object:
        if self.cells is None:
            self.cells = self.table.row_cells(*self.state)
        return self.cells[index]


class _LazyCell:
    """One cell of a _LazyRow: renders (and reads, e.g. `.plain`) as the Text it stands for;
    `run_key` is its row's key (what the table's order is sorted by, without building the row)."""

    __slots__ = ("index", "row", "run_key")

    def __init__(self, row: _LazyRow, index: int, run_key: str) -> None:
        self.row, self.index, self.run_key = row, index, run_key

    def __rich__(self) -> object:  # (what Rich renders: the Text, built on first use)
        return self.row.cell(self.index)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield cast(Text, self.row.cell(self.index))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, cast(Text, self.row.cell(self.index)))

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # (Rich probes for __rich__ and the like: not the Text's)
            raise AttributeError(name)
        return getattr(self.row.cell(self.index), name)


LAZY: tuple[tuple[object, ...], ...] = ()  # the signature of a row added lazily (never compared equal)


def _run_key(cell: object) -> str:
    """The run key of an id cell: `12`, `●12` (compact, selected) or a lazy cell's."""
    return cell.run_key if isinstance(cell, _LazyCell) else cast(Text, cell).plain.lstrip("●")


class RunsTable(DataTable):
    """Rows are keyed by run id. Setting `runs` (in display order) or `selected_ids` adds,
    removes and updates only the rows and cells that changed and then puts the cursor back on
    the run it was on, wherever that run now sits. `sorted_by` marks the sort in the header."""

    DEFAULT_CSS = css_beside(__file__)

    runs: var[tuple[RunRow, ...]] = var((), init=False)
    selected_ids: var[frozenset[int]] = var(frozenset(), init=False)
    sorted_by: var[tuple[str, bool]] = var(("id", True), init=False)  # (column, descending)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._cells: dict[str, tuple[tuple[object, ...], ...]] = {}
        self._shown: dict[str, tuple[RunRow, bool]] = {}
        self._sync_pending = False
        self._widths: dict[str, int] = {}
        self._keep: int | None = None  # the run the cursor was on before the columns were rebuilt
        self._compact = False
        self._fact_objects: dict[int, RunRow] = {}  # id(row) -> row, the rows _facts last counted
        self._fact_cache: dict[int, tuple] = {}  # run id -> (row, label length, flags, metrics)
        self._lengths: Counter[int] = Counter()  # label length -> rows with it
        self._flags: Counter[str] = Counter()  # "anytime" / a compact metric -> rows with it
        self._keys: dict[int, str] = {}  # run id -> its row key
        self._order: list[str] = []  # the row keys in the order last applied
        self._dirty: dict[str, tuple[RunRow, bool]] = {}  # changed rows off screen, drawn when scrolled to

    def on_mount(self) -> None:
        self._layout(self.size.width or 120)

    def on_resize(self) -> None:
        self._relayout()

    def _facts(self, changed: list[RunRow] | None = None) -> tuple[int, bool, frozenset[str]]:
        """What the columns depend on: the longest run label, whether a task-free run (A_auc) is
        listed, and which optional compact metrics some run has. Counted incrementally per run
        row object (`_fact_cache`), so a refresh looks only at the rows that changed: `changed`,
        the rows that replaced shown rows in place (`patch`), else found by identity."""
        cache, lengths, flags = self._fact_cache, self._lengths, self._flags
        runs = self.runs
        if changed is not None:
            objects = self._fact_objects
            fresh = []
            for r in changed:
                f = cache.get(r.id)
                if f is None:  # not shown (filtered out): no fact of it
                    continue
                objects.pop(id(f[0]), None)
                objects[id(r)] = r
                fresh.append(r)
        else:
            # the row objects not seen at the last call, found by set arithmetic on their identities
            # (C speed over 10,000 rows; the loop below then visits only the rows that changed)
            objects = dict(zip(map(id, runs), runs))
            fresh = [objects[i] for i in objects.keys() - self._fact_objects.keys()]
            self._fact_objects = objects
        for r in fresh:
            f = cache.get(r.id)
            if f is not None and f[0] is r:
                continue
            metrics = r.metrics
            if f is not None and f[0].metrics is metrics and f[0].label == r.label:  # (a live run's progress)
                cache[r.id] = (r, *f[1:])
                continue
            new = (
                len(r.label),
                ("anytime",) if any(name in metrics for name in TASK_FREE_ONLY) else (),
                tuple(name for name in (*COMPACT_METRICS, *WHEN_MEASURED) if metrics.get(name) is not None),
            )
            if f is not None:
                if f[1:] == new:  # (most changes, a live run's progress: the same facts)
                    cache[r.id] = (r, *new)
                    continue
                self._count(f, -1)
            f = cache[r.id] = (r, *new)
            self._count(f, 1)
        if len(cache) != len(runs):  # rows left (a filter, a deleted run)
            keep = {r.id for r in runs}
            for i in [i for i in cache if i not in keep]:
                self._count(cache.pop(i), -1)
        width = max((n for n, c in lengths.items() if c > 0), default=8)
        return width, flags["anytime"] > 0, frozenset(k for k in (*COMPACT_METRICS, *WHEN_MEASURED) if flags[k] > 0)

    def _count(self, fact: tuple, sign: int) -> None:
        self._lengths[fact[1]] += sign
        for name in (*fact[2], *fact[3]):
            self._flags[name] += sign

    def _wanted_layout(self, width: int, changed: list[RunRow] | None = None) -> dict[str, int]:
        run_width, anytime, present = self._facts(changed)
        return layout(width, run_width, anytime, present)

    def _anytime(self) -> bool:
        """A run with a task-free-only metric (A_auc) is listed."""
        return self._facts()[1]

    @property
    def compact(self) -> bool:
        """The folded columns of a narrow terminal are shown."""
        return self._compact

    def _columns(self) -> tuple[tuple[str, str, int, str, int], ...]:
        """The column definitions of the current mode, in order."""
        if self._compact:
            return COMPACT_COLUMNS + tuple(c for c in COLUMNS if c[0] in self._widths and c[0] not in RUN_KEYS)
        return COLUMNS

    def _relayout(self) -> None:
        if self.size.width and self._wanted_layout(self.size.width) != self._widths:
            self._layout(self.size.width)

    def _layout(self, width: int) -> None:
        """(Re)build the columns for this width: everything is drawn again from `runs`."""
        self._widths = self._wanted_layout(width)
        self._compact = width < COMPACT_WIDTH
        keep = self.cursor_run_id
        self.clear(columns=True)
        self._cells.clear()
        self._shown.clear()
        self._dirty.clear()
        self._order = []
        for key, label, _, justify, _ in self._columns():
            if key in self._widths:
                self.add_column(Text(label, justify=justify), width=self._widths[key], key=key)  # type: ignore[arg-type]  # COLUMNS' justify: "left"/"right"
        self.watch_sorted_by()
        self._keep = keep
        self._sync()

    @property
    def cursor_run_id(self) -> int | None:
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
        cells: dict[str, object] = {
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
        if self._compact:
            cells.update(self._compact_cells(row, selected, label, changes))
        digits = 1 if self._compact else None
        for m in METRICS:  # the @k/T column bold, a task-free one cyan, the others grey when partial
            if m.name not in self._widths:
                continue
            has = row.value(m.name) is not None
            if m is CARRIER:
                style = partial or ("bold" if has else "grey50")
            elif m.name in TASK_FREE_ONLY:
                style = "bold cyan" if has else "grey50"
            else:
                style = partial if m.final_only and m.across is None else ""
            value = row.metric_text(m.name, mark=m is CARRIER, digits=digits)
            if has and row.partial and m.final_only and m is not CARRIER:
                value = "@" + value  # partial: never bare (the @k/T column says after which task)
            cells[m.name] = Text(value, justify="right", style=style)
        return tuple(cells[key] for key, *_ in self._columns() if key in self._widths)

    @staticmethod
    def _compact_cells(row: RunRow, selected: bool, label: Text, changes: Text) -> dict[str, object]:
        """The folded cells: `●12`, a live run's `3/5 40%` as its status, the run's name then its
        overrides and tags, `rm·500·s2`."""
        ident = Text(f"{row.id}", justify="right")
        if selected:
            ident = Text.assemble(("●", "bold yellow"), f"{row.id}", justify="right")
        if row.active and row.task is not None:
            status = Text(f"{row.task + 1}/{row.n_tasks}", style="bold cyan")
            if row.phase_fraction is not None:
                status.append(f" {row.phase_fraction:3.0%}", style="cyan")
        else:
            status = status_text(row.status)
        run = label.copy()
        if changes.plain:
            run.append(" ")
            run.append_text(changes)
        k = row.memory_size if row.memory_size is not None else "—"
        return {
            "id": ident,
            "status": status,
            "preset": run,
            "method": Text(f"{row.method}·{k}·s{row.seed}", overflow="ellipsis", no_wrap=True),
        }

    def watch_runs(self) -> None:
        if self.is_mounted and self.size.width and self._wanted_layout(self.size.width) != self._widths:
            self._layout(self.size.width)  # (a longer run label arrived: it syncs too)
            return
        self._sync()

    def watch_selected_ids(self) -> None:
        self._sync()

    def patch(self, runs: tuple[RunRow, ...], changed: Iterable[RunRow] | None) -> None:
        """Show `runs` (in display order) when only the rows in `changed` differ from the rows
        shown and none of them moved: only their cells are rebuilt and compared (the rest, their
        order and the cursor are left alone). `changed` None: look at every row, as setting
        `runs` does (a row came, went or moved: the table re-sorts)."""
        if changed is None or not self.is_mounted:
            self.runs = runs
            return
        changed = list(changed)
        self.set_reactive(RunsTable.runs, runs)  # (no watcher: the rows that changed are drawn below)
        if self.size.width and self._wanted_layout(self.size.width, changed) != self._widths:
            self._layout(self.size.width)  # (a longer run label arrived: everything is drawn again)
            return
        self._sync(changed)

    def _sync(self, only: list[RunRow] | None = None) -> None:
        """Make the table show `runs` in this order, touching only rows and cells that changed.

        At most FIRST_BATCH (then ADD_BATCH) new rows are added per call, first rows first, so a
        big store shows its first screenful at once (DataTable measures every new cell); the rest
        follow after each repaint. `only`: just these rows changed, in place (`patch`)."""
        if only is not None:
            self._sync_rows(only)
            return
        self._sync_pending = False
        keep = self.cursor_run_id if self._keep is None else self._keep
        self._keep = None
        keys = self._keys
        wanted = {keys.get(r.id) or keys.setdefault(r.id, str(r.id)): r for r in self.runs}
        for key in [k for k in self._cells if k not in wanted]:
            self.remove_row(key)
            del self._cells[key], self._shown[key]
            self._dirty.pop(key, None)
        added, limit = 0, ADD_BATCH if self._cells else FIRST_BATCH
        pending = False
        new_rows: list[tuple[str, tuple[RunRow, bool]]] = []
        top, bottom = self._visible_rows()
        # (locals: this loop visits every listed run, 10,000 on a big store; a reactive's
        # descriptor or an attribute lookup per run costs more than the loop itself)
        selected_ids, shown_rows, dirty, drawn = self.selected_ids, self._shown, self._dirty, self._cells
        locations = self._locations()
        for key, row in wanted.items():
            selected = row.id in selected_ids
            shown = shown_rows.get(key)
            if shown is not None and shown[0] is row and shown[1] == selected:
                continue  # the same run, drawn the same: nothing to build (identity: no field compare)
            waiting = dirty.get(key)
            if waiting is not None and waiting[0] is row and waiting[1] == selected:
                continue  # already waiting to be drawn when scrolled into view
            old = drawn.get(key)
            if old is None:
                if added >= limit:
                    pending = True
                    continue
                added += 1
                new_rows.append((key, (row, selected)))  # (added together below)
                continue
            elif not top <= (locations.get(key) or 0) < bottom:
                dirty[key] = (row, selected)  # off screen: drawn when scrolled into view
                continue
            self._draw(key, (row, selected), old)
        self._add_rows(new_rows)
        order = [k for k in wanted if k in self._cells] if pending or len(self._cells) != len(wanted) else list(wanted)
        if order != self._order:
            # new rows go to the bottom: a table whose rows were only appended in order is not re-sorted
            appended = [k for k in self._order if k in self._cells] + [k for k, _ in new_rows]
            self._order = order
            if appended != order:
                rank = {k: i for i, k in enumerate(order)}
                self.sort("id", key=lambda cell: rank[_run_key(cell)])
        if keep is not None and str(keep) in self._cells:
            self.move_cursor(row=self.get_row_index(str(keep)), scroll=False)
        if pending and not self._sync_pending:
            self._sync_pending = True
            self.call_after_refresh(self._sync)  # a big store: the rest after this frame

    def _sync_rows(self, rows: list[RunRow]) -> None:
        """Draw these rows, which replaced shown rows where they stand (the `_sync` loop's body
        for them alone: a row off screen waits in `_dirty`, one not added yet is added by the
        pending `_sync` from `runs`)."""
        selected_ids, shown_rows, dirty, drawn, keys = (
            self.selected_ids,
            self._shown,
            self._dirty,
            self._cells,
            self._keys,
        )
        top, bottom = self._visible_rows()
        locations = self._locations()
        for row in rows:
            key = keys.get(row.id)
            old = drawn.get(key) if key is not None else None
            if key is None or old is None:
                continue  # not shown, or not added yet
            selected = row.id in selected_ids
            shown = shown_rows.get(key)
            if shown is not None and shown[0] is row and shown[1] == selected:
                continue
            if not top <= (locations.get(key) or 0) < bottom:
                dirty[key] = (row, selected)  # off screen: drawn when scrolled into view
                continue
            self._draw(key, (row, selected), old)

    def _locations(self) -> Mapping[str, int]:
        """Row key -> row index. DataTable keys it by RowKey, which hashes and compares as its
        string: looked up by the plain key, without a RowKey per row in the 10,000-row loops."""
        return cast("Mapping[str, int]", self._row_locations)

    def _visible_rows(self) -> tuple[int, int]:
        """The row indices on screen, with a screenful of margin either side."""
        height = max(self.size.height, 1)
        top = int(self.scroll_y)
        return top - height, top + 2 * height

    def _draw(self, key: str, state: tuple[RunRow, bool], old: tuple[tuple[object, ...], ...] | None) -> None:
        """Add the row, or update the cells of it that changed."""
        if old is None:  # a new row: its cells are built when it is first drawn
            self._add_rows([(key, state)])
            return
        self._dirty.pop(key, None)
        self._shown[key] = state
        if old is LAZY:  # a row added lazily: compared with the cells it drew, if it was ever drawn
            drawn = self._lazy_row(key)
            if drawn is not None and drawn.cells is None:
                drawn.state = state  # never drawn: it will draw this state
                return
            if drawn is not None and drawn.cells is not None:
                old = tuple(_signature(c) for c in drawn.cells)
        cells = self.row_cells(*state)
        signature = tuple(_signature(c) for c in cells)
        if old != signature:
            column_keys = [c[0] for c in self._columns() if c[0] in self._widths]
            for column, cell, new, was in zip(column_keys, cells, signature, old or (None,) * len(cells)):
                if new != was:
                    self.update_cell(key, column, cell)
        self._cells[key] = signature

    def _add_rows(self, new_rows: list[tuple[str, tuple[RunRow, bool]]]) -> None:
        """Add rows at the bottom, each drawn lazily (_LazyRow). What DataTable.add_row does per
        row (the key maps, the Row, the cursor clamped, the caches invalidated, an idle check),
        once for the batch: add_row's per-row share of that was most of the cost of 10,000 rows."""
        if not new_rows:
            return
        columns = self.ordered_columns
        locations, cells_of, rows = self._row_locations, self._data, self.rows
        start = self.row_count
        for offset, (key, state) in enumerate(new_rows):
            row_key = RowKey(key)
            if row_key in locations:
                raise DuplicateKey(f"The row key {row_key!r} already exists.")
            lazy = _LazyRow(self, state)
            locations[row_key] = start + offset
            cells_of[row_key] = {column.key: _LazyCell(lazy, i, key) for i, column in enumerate(columns)}
            rows[row_key] = Row(row_key, 1, None, False)
            self._new_rows.add(row_key)
            self._dirty.pop(key, None)
            self._shown[key] = state
            self._cells[key] = LAZY
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        if start == 0 and columns and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()  # (a cell to highlight where there was none)
        self._update_count += 1
        self.check_idle()

    def _lazy_row(self, key: str) -> _LazyRow | None:
        """The _LazyRow behind a row added lazily (None once a cell of it was replaced by a Text)."""
        cells = cast("Mapping[str, Mapping[object, object]]", self._data).get(key)
        first = next(iter(cells.values()), None) if cells else None
        return first.row if isinstance(first, _LazyCell) else None

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """DataTable measures every cell of every new row here (Rich's measure of each Text, most
        of the cost of adding 10,000 rows); it only serves auto-width columns and auto-height rows,
        and every column here has a width set (`_layout`) and every row is one line high with no
        label. So the new rows are not measured: only the scrollable size is recomputed."""
        super()._update_dimensions(())

    def watch_scroll_y(self, old: float, new: float) -> None:
        """Rows that changed while off screen are drawn as they scroll into view."""
        super().watch_scroll_y(old, new)
        if self._dirty:
            top, bottom = self._visible_rows()
            locations = self._locations()
            for key in [k for k in self._dirty if top <= (locations.get(k, -1)) < bottom]:
                if key in self._cells:
                    self._draw(key, self._dirty[key], self._cells[key])

    def watch_sorted_by(self) -> None:
        """Show the sort column and direction in the header."""
        column, descending = self.sorted_by
        if self._compact:  # a folded column shows the mark of any of the sorts it holds
            column = {"selected": "id", "K": "method", "seed": "method"}.get(column, column)
        for key, label, _, justify, _ in self._columns():
            if key not in self._widths:
                continue
            text = Text(label, justify=justify)  # type: ignore[arg-type]  # COLUMNS' justify: "left"/"right"
            if key == column:
                text.append(" ▼" if descending else " ▲", style="bold")
            self.columns[key].label = text  # type: ignore[index]  # a ColumnKey hashes and compares as its str
        self.refresh()
