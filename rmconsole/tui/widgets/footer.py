"""Textual's footer, rebuilt only when what it shows changes."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer as TextualFooter


class Footer(TextualFooter):
    """Textual's Footer recomposes all its keys on every bindings update of its screen (each
    focus move, mount and `refresh_bindings`), even when the keys it shows are the same: on
    start-up that was ~70 key widgets styled for the same dozen keys, ~0.15 s of CPU before the
    first frame. This one passes an update on only when the shown keys, their descriptions or
    their enabled state differ from the last update it passed on."""

    _last_shown: tuple | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Compact: at 80 columns every shown key fits, `?` and `q` included."""
        super().__init__(*args, **kwargs)
        self.compact = True

    def _shown_keys(self, screen: Screen) -> tuple:
        return tuple(
            (binding.key, binding.action, binding.description, enabled, tooltip)
            for (_, binding, enabled, tooltip) in screen.active_bindings.values()
            if binding.show
        )

    def bindings_changed(self, screen: Screen) -> None:
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            shown = self._shown_keys(screen)
            if shown == self._last_shown:
                return
            self._last_shown = shown
        super().bindings_changed(screen)
