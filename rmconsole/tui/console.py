"""What a page (or the command palette) may ask of the App: routing and shared state.

Screens and commands type `self.app` as `Console` instead of importing the App class, so the
App can import its pages without an import cycle (app -> screens, never screens -> app).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Protocol

from ..runner.request import LaunchRequest
from .data import RunRow


class Console(Protocol):
    """The App's face towards its pages; `RMConsoleApp` is the one implementation."""

    refresh_s: float  # seconds between store reads
    clock: Callable[[], datetime]  # what "heartbeat N s ago" is measured against
    selected: frozenset[int]  # runs picked for Compare (reactive on the App: pages watch it)
    rows: list[RunRow]  # the latest read of all runs (command palette, stop confirmation)

    def open_run(self, run_id: int) -> None: ...

    def pop_screen(self) -> Any: ...  # textual's App.pop_screen: back to the page below

    @property
    def size(self) -> Any: ...  # textual's App.size (a Size: width, height)

    def open_compare(self, run_ids: Iterable[int] | None = None) -> None: ...

    def open_study(self, name: str) -> None: ...  # a `rmconsole tune` study's page

    def open_launch(self, clone_of: int | None = None) -> None: ...

    def confirm_stop(self, run_id: int) -> None: ...

    def confirm_stop_sweep(self, sweep_id: str) -> None: ...

    def resume_run(self, run_id: int) -> Any: ...

    def launch(self, request: LaunchRequest) -> Any: ...  # a run or a sweep, as `rmconsole run --detach`

    def toggle_selected(self, run_id: int) -> None: ...
