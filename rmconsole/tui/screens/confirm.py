"""A yes/no question over the current page (used before stopping a run)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True on `y` / the confirm button, False on `n`, Esc or Cancel."""

    CSS_PATH = "confirm.tcss"
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "Cancel"),
    ]

    def __init__(self, question: str, detail: str = "", confirm: str = "Yes") -> None:
        super().__init__()
        self.question, self.detail, self.confirm = question, detail, confirm

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question, id="question")
            if self.detail:
                yield Static(self.detail, id="detail")
            with Horizontal(id="buttons"):
                yield Button(f"{self.confirm} (y)", variant="error", id="yes")
                yield Button("Cancel (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
