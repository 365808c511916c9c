"""Launch a run: pick a preset, edit overrides (as `rmconsole run --set`), check the resulting
config, start it through the same `runner.launch_run` as the CLI."""

from __future__ import annotations

import shlex
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Header, Input, Label, Select, Static

from ...config import (
    DEFAULT_PRESET, KEYS, ConfigError, for_method, load_config, preset_description, preset_names, read_preset,
)
from ..console import Console


def split_overrides(text: str) -> list[str]:
    """`epochs=2 seed=3 augment="cutmix+autoaug"` → ['epochs=2', 'seed=3', 'augment="cutmix+autoaug"'] (shell quoting)."""
    try:
        return shlex.split(text, posix=False)
    except ValueError as err:
        raise ConfigError(f"overrides {text!r}: {err}") from None


def preview(preset: str, overrides_text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The config a launch would store, and where each value came from (preset, override, default)."""
    pairs = split_overrides(overrides_text)
    name, cfg = load_config(preset, pairs)
    _, table = read_preset(preset)
    overridden = {p.partition("=")[0].strip() for p in pairs}
    from_preset = for_method(table, {"method": cfg.method})
    sources = {k: "override" if k in overridden else "preset" if k in from_preset else "default" for k in KEYS}
    return cfg.to_dict(), sources


class LaunchScreen(Screen):
    CSS_PATH = "launch.tcss"
    BINDINGS = [
        Binding("ctrl+s", "start", "Start run", priority=True),
        Binding("escape", "back", "Back"),
    ]

    app: Console  # type: ignore[assignment]

    def __init__(self, preset: str = DEFAULT_PRESET) -> None:
        super().__init__()
        self.preset = preset if preset in preset_names() else preset_names()[0]
        self.valid = False
        self._starting = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="form", classes="panel"):
            yield Label("Preset")
            yield Select([(name, name) for name in preset_names()], value=self.preset, allow_blank=False, id="preset")
            yield Static(id="description")
            yield Label("Overrides")
            yield Input(placeholder="epochs=2 seed=3 memory_size=500 augment=cutmix+autoaug", id="overrides")
            yield Static(Text("KEY=VALUE pairs separated by spaces, as `rmconsole run --set KEY=VALUE`; "
                              "the table shows the config that will be stored.", style="grey62"), id="overrides-help")
            yield Static(id="launch-error")
            with Horizontal(id="launch-buttons"):
                yield Button("Start run (ctrl+s)", variant="success", id="start")
                yield Button("Back (Esc)", id="back")
        preview_table: DataTable = DataTable(id="config-preview", cursor_type="none", zebra_stripes=True,
                                             classes="panel")
        preview_table.border_title = "config that will be stored"
        yield preview_table
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "launch a run"
        table = self.query_one("#config-preview", DataTable)
        table.add_column("key", key="key")
        table.add_column("value", key="value")
        table.add_column("from", key="from")
        self.query_one("#overrides", Input).focus()
        self.update_preview()

    @on(Select.Changed, "#preset")
    def _preset_changed(self, event: Select.Changed) -> None:
        self.preset = str(event.value)
        self.update_preview()

    @on(Input.Changed, "#overrides")
    def _overrides_changed(self) -> None:
        self.update_preview()

    @on(Input.Submitted, "#overrides")
    def _overrides_submitted(self) -> None:
        self.action_start()

    def update_preview(self) -> None:
        """Validate on every keystroke (pure and fast: no store, no torch)."""
        self.query_one("#description", Static).update(Text(preset_description(self.preset), style="grey62"))
        table = self.query_one("#config-preview", DataTable)
        try:
            config, sources = preview(self.preset, self.query_one("#overrides", Input).value)
        except ConfigError as err:
            self.valid = False
            self.show_error(str(err))
            table.border_subtitle = "last valid config: fix the overrides to start"
            table.add_class("stale")
            return
        self.valid = True
        self.show_error(None)
        table.border_subtitle = ""
        table.remove_class("stale")
        table.clear()
        for key in KEYS:
            source = sources[key]
            style = "bold yellow" if source == "override" else "" if source == "preset" else "grey50"
            table.add_row(Text(key, style=style), Text(str(config[key]), style=style), Text(source, style=style),
                          key=key)

    def show_error(self, text: str | None) -> None:
        box = self.query_one("#launch-error", Static)
        self._starting = False if text else self._starting
        box.update(Text(text or "", style="bold red"))
        box.set_class(bool(text), "shown")

    def action_start(self) -> None:
        if self._starting:
            return
        self.update_preview()
        if not self.valid:
            return
        self._starting = True
        self.query_one("#launch-error", Static).update(Text("starting…", style="cyan"))
        self.app.launch_run(self.preset, split_overrides(self.query_one("#overrides", Input).value))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self.action_start()
        else:
            self.action_back()

    def action_back(self) -> None:
        self.app.pop_screen()
