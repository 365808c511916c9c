"""The base of every page that shows the store: read it every `app.refresh_s` in a thread.

One read at a time per page: a tick that finds the last read still running (a locked store
waits out its busy timeout) starts nothing, so a slow store never piles up reads, and the UI
thread never waits on the store. A read's result comes back as the typed message `read()`
returns; a failed read as `StoreProblem` (the page keeps its last data, the next tick
retries); a run deleted under the page as `RunVanished` (and the page stops reading).
"""

from __future__ import annotations

from textual import events, on, work
from textual.message import Message
from textual.screen import Screen

from .. import data
from ..console import Console
from ..messages import RunVanished, StoreProblem


class PollingScreen(Screen):
    """Subclasses implement `read()` (runs in a worker thread) and handle the message it
    returns. Polling starts on mount and reads at once when the page comes back on top."""

    app: Console  # type: ignore[assignment]  # Screen.app seen through the App's face (tui/console.py)

    def __init__(self) -> None:
        super().__init__()
        self._reading = False
        self._polling = True

    def read(self) -> Message:
        """Read the store (in a worker thread, never the UI thread) and return the message
        that carries the result to the page."""
        raise NotImplementedError

    @on(events.Mount)
    def _start_polling(self) -> None:
        # a decorated handler: it runs after (not instead of) a subclass's own on_mount
        self.set_interval(self.app.refresh_s, self.poll, name=f"{type(self).__name__} refresh")
        self.poll()

    @on(events.ScreenResume)
    def _poll_on_resume(self) -> None:
        self.poll()

    def poll(self) -> None:
        """Timer tick: start a read unless one is still running or the page stopped reading."""
        if self._reading or not self._polling or not self.is_attached:
            return
        self._reading = True
        self._read()

    @work(thread=True, group="store-read", exit_on_error=False)
    def _read(self) -> None:
        try:
            message = self.read()
        except data.RunGone as gone:
            self._polling = False
            self.post_message(RunVanished(gone.run_id))
        except Exception as err:  # noqa: BLE001 - a locked or unreachable store is shown, then retried
            self.post_message(StoreProblem(data.describe_store_error(err)))
        else:
            self.post_message(message)
        finally:
            self._reading = False
