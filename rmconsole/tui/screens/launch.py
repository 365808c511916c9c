"""Launch a run or a sweep: pick a preset, edit overrides (as `rmconsole run --set`; a comma list
makes a grid), seeds (`--seeds`), a name and tags; check the resulting config; start it through
the same `runner.launch_request` as the CLI. The form's inputs are derived from the launch
options that declare a form field (runner/request.py: `LaunchRequest`), and read back into one.
`LaunchScreen.cloning(run)` opens it filled with a stored run's preset, overrides, name and tags."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, DataTable, Header, Input, Label, Select, Static

from ...config import (
    DEFAULT_PRESET,
    ConfigError,
    for_method,
    load_config,
    overrides_of,
    preset_description,
    preset_names,
    read_preset,
)
from ...runner.request import LaunchRequest, check_sweep_name_form, split_overrides
from ...store.records import RunRecord, format_value
from ..console import Console
from ..widgets.footer import Footer


def preview(
    preset: str, overrides_text: str, seeds: str = "", name: str = "", sweep_name: str = "", name_template: str = ""
) -> tuple[dict[str, Any], dict[str, str], str]:
    """The config a launch would store (a sweep's first grid point), where each value came from
    (preset, override, default, sweep axis), and a line saying what will start. For a sweep, the
    sweep name's form and the run-name template are checked as `rmconsole run --sweep-name
    --name-template` check them (ConfigError, one line) and the first runs' names are shown; that
    no sweep of that name is stored yet is checked at launch (it reads the store)."""
    from ...runner.sweep import fold_seed, is_sweep, plan_sweep, run_names

    pairs, seed_list = fold_seed(split_overrides(overrides_text), seeds.strip() or None)  # one seed: one run
    overridden = {p.partition("=")[0].strip() for p in pairs}
    _, table = read_preset(preset)
    if is_sweep(pairs, seed_list):
        plan = plan_sweep(preset, pairs, seed_list)
        axes = {k for k, v in plan.axes.items() if len(v) > 1}
        from_preset = for_method(table, {"method": plan.configs[0].method})
        config = plan.configs[0].to_dict()
        sources = {
            k: "sweep axis"
            if k in axes
            else "override"
            if k in overridden
            else "preset"
            if k in from_preset
            else "default"
            for k in config
        }
        what = f"a sweep of {len(plan.configs)} runs ({plan.shape()})"
        check_sweep_name_form(sweep_name or None)  # the runner's rule (its form; the store's names at launch)
        names = run_names(plan, name or None, name_template or None, sweep_name, bool(sweep_name))
        if any(names):
            more = ", …" if len(names) > 2 else ""
            what += f" named {', '.join(str(n) for n in names[:2])}{more}"
        return config, sources, what + "; the table shows its first run"
    LaunchRequest(sweep_name=sweep_name or None, name_template=name_template or None).check_one_run()
    _, cfg = load_config(preset, pairs)
    from_preset = for_method(table, {"method": cfg.method})
    config = cfg.to_dict()  # the keys every run has, then the method's own
    sources = {k: "override" if k in overridden else "preset" if k in from_preset else "default" for k in config}
    return config, sources, "one run"


def clone_overrides(row: RunRecord) -> tuple[str, str]:
    """(preset, overrides text) that give a stored run's config again: its preset (the default
    when that preset is gone) and every key that differs from it, as `--set` writes them."""
    preset = row.preset if row.preset in preset_names() else DEFAULT_PRESET
    config = dict(row.config)
    changed = overrides_of(preset, config)
    _, base = load_config(preset)
    if config.get("seed") != base.seed:
        changed["seed"] = config.get("seed")
    pairs = []
    for key, value in changed.items():
        if value is None:
            continue  # (no --set gives None: such a key is at its default already)
        text = format_value(value)
        pairs.append(f'{key}="{text}"' if " " in text else f"{key}={text}")
    return preset, " ".join(pairs)


class LaunchScreen(Screen):
    CSS_PATH = "launch.tcss"
    BINDINGS = [
        Binding("ctrl+s", "start", "Start run", priority=True),
        Binding("escape", "back", "Back"),
        # Tab moves focus as the App receives it (a priority binding), before the next key is
        # forwarded: as a plain binding it took effect only after the key had bubbled back up
        # from the focused Input, so keys typed right after Tab landed in the previous field
        Binding("tab", "app.focus_next", "Next field", show=False, priority=True),
        Binding("shift+tab", "app.focus_previous", "Previous field", show=False, priority=True),
    ]

    app: Console  # type: ignore[assignment]  # Screen.app seen through the App's face (tui/console.py)

    def __init__(
        self,
        preset: str = DEFAULT_PRESET,
        overrides: str = "",
        name: str = "",
        tags: str = "",
        seeds: str = "",
        cloned_from: int | None = None,
    ) -> None:
        super().__init__()
        self.preset = preset if preset in preset_names() else preset_names()[0]
        self.initial = {"overrides": overrides, "name": name, "tags": tags, "seeds": seeds}  # by option
        self.cloned_from = cloned_from
        self.valid = False
        self._starting = False
        self.what = "one run"

    @classmethod
    def cloning(cls, row: RunRecord) -> LaunchScreen:
        """The launch page filled with a stored run's preset, overrides (seed included), name and tags."""
        preset, overrides = clone_overrides(row)
        return cls(preset, overrides, row.name or "", " ".join(row.tags), cloned_from=row.id)

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="form", classes="panel"):
            yield Label("Preset")
            yield Select([(name, name) for name in preset_names()], value=self.preset, allow_blank=False, id="preset")
            yield Static(id="description")
            yield from self._fields()
            yield Static(id="launch-error")
            with Horizontal(id="launch-buttons"):
                yield Button("Start run (ctrl+s)", variant="success", id="start")
                yield Button("Back (Esc)", id="back")
        preview_table: DataTable = DataTable(
            id="config-preview", cursor_type="none", zebra_stripes=True, classes="panel"
        )
        preview_table.border_title = "config that will be stored"
        yield preview_table
        yield Footer()

    def _fields(self) -> ComposeResult:
        """The inputs of the launch options that declare a form field, in their order: options
        with the same label share a row (side by side in its container)."""
        fields = [(f.name, spec.form) for f, spec in LaunchRequest.options() if spec.form is not None]
        for label, grouped in groupby(fields, key=lambda item: item[1].label):
            row = list(grouped)
            yield Label(label)
            inputs = [Input(self.initial.get(name, ""), placeholder=form.placeholder, id=form.id) for name, form in row]
            if len(inputs) == 1:
                yield inputs[0]
            else:
                with Horizontal(id=row[0][1].row_id):
                    yield from inputs
            for _, form in row:
                if form.help:
                    yield Static(Text(form.help, style="grey62"), id=f"{form.id}-help")

    def _texts(self) -> dict[str, str]:
        """What each form field holds, by option name."""
        return {
            f.name: self.query_one(f"#{spec.form.id}", Input).value
            for f, spec in LaunchRequest.options()
            if spec.form is not None
        }

    def on_mount(self) -> None:
        self.sub_title = f"launch: a clone of run {self.cloned_from}" if self.cloned_from else "launch a run"
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

    @on(Input.Changed)
    def _overrides_changed(self) -> None:
        self.update_preview()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_start()

    def update_preview(self) -> None:
        """Validate on every keystroke (pure and fast: no store, no torch)."""
        self.query_one("#description", Static).update(Text(preset_description(self.preset), style="grey62"))
        table = self.query_one("#config-preview", DataTable)
        texts = self._texts()
        try:
            config, sources, what = preview(
                self.preset,
                texts["overrides"],
                texts["seeds"],
                texts["name"].strip(),
                texts["sweep_name"].strip(),
                texts["name_template"].strip(),
            )
        except ConfigError as err:
            self.valid = False
            self.show_error(str(err))
            table.border_subtitle = "last valid config: fix the overrides to start"
            table.add_class("stale")
            return
        self.valid = True
        self.show_error(None)
        self.what = what
        table.border_subtitle = what
        table.remove_class("stale")
        table.clear()
        for key in config:
            source = sources[key]
            style = {"override": "bold yellow", "sweep axis": "bold magenta", "preset": ""}.get(source, "grey50")
            table.add_row(
                Text(key, style=style), Text(format_value(config[key]), style=style), Text(source, style=style), key=key
            )

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
        try:
            request = LaunchRequest.from_form(self.preset, self._texts())
        except ConfigError as err:
            self.show_error(str(err))
            return
        self._starting = True
        self.query_one("#launch-error", Static).update(Text(f"starting {self.what}…", style="cyan"))
        self.app.launch(request)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self.action_start()
        else:
            self.action_back()

    def action_back(self) -> None:
        self.app.pop_screen()
