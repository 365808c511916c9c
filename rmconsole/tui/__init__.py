"""The Textual UI: `rmconsole tui`."""

from .app import RMConsoleApp

__all__ = ["RMConsoleApp"]
