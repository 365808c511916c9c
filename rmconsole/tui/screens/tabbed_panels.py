"""The panel pages' (one run, one study) small-terminal rule: below NARROW_WIDTH × NARROW_HEIGHT
the grid of panels collapses into a tab row, one panel at a time at the full width; the keys
1-N or a click on a tab switch. Written once here so both pages switch the same way."""

from __future__ import annotations

from typing import ClassVar

from textual import events, on
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Tab, Tabs

NARROW_WIDTH, NARROW_HEIGHT = 100, 32  # below either, the panels collapse into tabs (one shown at a time)


def panel_keys(panels: tuple[tuple[str, str], ...]) -> list[Binding]:
    """The keys 1-N, each showing one panel (N: how many there are)."""
    return [Binding(str(i + 1), f"show_panel('{panel}')", label, show=False) for i, (panel, label) in enumerate(panels)]


class TabbedPanels(Screen):
    """A mixin, named first among a page's bases (tabbed_panels.tcss selects on its name): the
    page declares PANELS and FIRST_PANEL, yields `panel_tabs()` and its panels in `#panels`
    (each with the class `panel` and the panel's id), and adds `panel_keys(PANELS)` to BINDINGS."""

    # the panels, in tab order: (widget id, tab label)
    PANELS: ClassVar[tuple[tuple[str, str], ...]]
    FIRST_PANEL: ClassVar[str]  # the one shown when the page opens on a small terminal

    def panel_tabs(self) -> Tabs:
        return Tabs(
            *(Tab(label, id=f"tab-{panel}") for panel, label in self.PANELS),
            active=f"tab-{self.FIRST_PANEL}",
            id="panel-tabs",
        )

    @on(events.Mount)
    def _show_first_panel(self) -> None:
        # a decorated handler: it runs after (not instead of) the page's own on_mount
        self.query_one(f"#{self.FIRST_PANEL}").add_class("shown")
        self._fit(self.app.size.width, self.app.size.height)

    @on(events.Resize)
    def _fit_on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        self.set_class(width < NARROW_WIDTH or height < NARROW_HEIGHT, "narrow")

    @property
    def narrow(self) -> bool:
        """The panels are tabs (one shown at a time)."""
        return self.has_class("narrow")

    def action_show_panel(self, panel: str) -> None:
        """Show (on a small terminal) and focus one panel."""
        self.query_one("#panel-tabs", Tabs).active = f"tab-{panel}"

    @on(Tabs.TabActivated, "#panel-tabs")
    def _tab_chosen(self, event: Tabs.TabActivated) -> None:
        panel = str(event.tab.id).removeprefix("tab-")
        for name, _ in self.PANELS:
            self.query_one(f"#{name}").set_class(name == panel, "shown")
        target = self.query_one(f"#{panel}", Widget)
        if target.can_focus:
            target.focus()
