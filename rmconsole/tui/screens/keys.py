"""`?`: rmconsole's own key help for the page underneath (not Textual's generic panel, which
listed the focused widget's keys, such as the table's "⏎ Select" where Enter opens a run)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

# what a key does where its binding's description is too short to say it (by screen class name)
MEANING = {
    ("RunsScreen", "enter"): "open the highlighted run (its stream, memory, accuracy, log)",
    ("RunsScreen", "slash"): "filter: words, or status:running tag:x method:er,rm 'A_last>88' k:200",
    ("RunsScreen", "space"): "select the highlighted run for Compare (● in the id column)",
    ("RunsScreen", "c"): "compare the selected runs (or the highlighted one)",
    ("RunsScreen", "s"): "sort by the next column (id, status, run, method, then the metrics)",
    ("RunsScreen", "r"): "reverse the sort",
    ("RunsScreen", "n"): "launch a run (preset, overrides, seeds)",
    ("RunsScreen", "x"): "stop the highlighted run (asks first)",
    ("RunsScreen", "X"): "stop the highlighted run's whole sweep (asks first)",
    ("RunsScreen", "R"): "resume a failed or stopped run from its last task",
    ("RunsScreen", "l"): "clone: the launch form filled with this run's settings",
    ("RunsScreen", "a"): "show or hide archived runs",
    ("RunsScreen", "escape"): "clear the filter",
    ("RunsScreen", "t"): "the study page of the filter's study:NAME, or of the highlighted tune trial",
    ("StudyScreen", "enter"): "open the highlighted trial's run",
    ("StudyScreen", "escape"): "back",
    ("RunScreen", "escape"): "back to the runs (or un-maximize a panel)",
    ("RunScreen", "left_square_bracket"): "earlier memory update",
    ("RunScreen", "right_square_bracket"): "later memory update",
    ("RunScreen", "m"): "maximize the focused panel (m or Esc again: back)",
    ("RunScreen", "space"): "select this run for Compare",
    ("CompareScreen", "enter"): "open the highlighted run",
}
KEY_NAMES = {
    "slash": "/",
    "space": "Space",
    "enter": "Enter",
    "escape": "Esc",
    "question_mark": "?",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "ctrl+p": "ctrl+p",
}


def key_rows(screen: Screen) -> list[tuple[str, str]]:
    """(key, what it does) for the page's own keys, then the app's: every binding, shown in the
    footer or not."""
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    name = type(screen).__name__
    for binding in [*screen.BINDINGS, *screen.app.BINDINGS]:
        if not isinstance(binding, Binding) or binding.key in seen:
            continue
        seen.add(binding.key)
        rows.append(
            (
                KEY_NAMES.get(binding.key, binding.key),
                MEANING.get((name, binding.key), binding.description or binding.action),
            )
        )
    rows.append(("ctrl+p", "command palette: find a run by name, tag, note, method… and open, stop or compare it"))
    return rows


class KeysScreen(ModalScreen[None]):
    """The keys of the page it covers; `?`, Esc or q closes it."""

    DEFAULT_CSS = """
    KeysScreen { align: center middle; background: $background 60%; }
    KeysScreen #keys { width: 90%; max-width: 96; height: auto; max-height: 90%; padding: 0 1;
                       border: round $primary; background: $surface; }
    """
    BINDINGS = [
        Binding("question_mark", "close", "Close"),
        Binding("escape", "close", "Close"),
        Binding("q", "close", "Close"),
    ]

    def __init__(self, page: Screen) -> None:
        super().__init__()
        self.rows = key_rows(page)
        self.title_text = f"keys · {getattr(page, 'sub_title', '') or type(page).__name__}"

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 1))
        table.add_column(style="bold yellow", no_wrap=True)
        table.add_column()
        for key, meaning in self.rows:
            table.add_row(key, meaning)
        with VerticalScroll(id="keys") as box:
            box.border_title = "rmconsole keys (? or Esc closes)"
            yield Static(table)
            yield Static(
                Text(
                    "Enter opens a run; numbers with @k/T are partial (after task k of T). Every symbol the "
                    "pages print (A_last, A@2/5, F@2/5, A_auc, '0/10 at share', old/new, ± and its "
                    "granularity): docs/glossary.md",
                    style="grey62",
                )
            )

    def action_close(self) -> None:
        self.dismiss(None)
