"""The top of the run page: what the run is, where it is, and its error if it failed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ...cl.protocols import is_task_free, setting_label
from ...config import reads_on_task_free
from ...numbers import duration
from ..data import RunRow, RunView
from ..render import bar, status_text
from . import css_beside


def describe(view: RunView) -> Text:
    row, cfg = view.row, view.config
    text = Text()
    text.append(f"run {row.id}", style="bold")
    if row.name:
        text.append(f" “{row.name}”", style="bold")
    text.append(f"  {row.preset or 'custom'}  ", style="grey62")
    text.append_text(status_text(row.status))
    if row.overrides_text:
        text.append(f"  {row.overrides_text}", style="yellow")
    if row.tags:
        text.append("  " + " ".join(f"#{t}" for t in row.tags), style="cyan")
    if row.partial and not row.active:
        text.append(f"  partial: {row.progress_mark} tasks", style="grey50")
    text.append(
        f"\n{row.method} on {row.dataset} · {cfg.get('model', '?')} · K={row.memory_size} · "
        f"{row.n_tasks or cfg.get('n_tasks')} tasks · {setting_label(cfg)} · "
        + (
            f"epochs {cfg.get('epochs')} · "
            if not is_task_free(cfg) or reads_on_task_free(row.method, "epochs")
            else ""
        )
        + f"seed {row.seed}",
        style="grey70",
    )
    return text


def heartbeat_age(row: RunRow, now: datetime | None) -> float | None:
    if now is None or row.heartbeat_at is None:
        return None
    beat = row.heartbeat_at if row.heartbeat_at.tzinfo else row.heartbeat_at.replace(tzinfo=UTC)
    return (now - beat).total_seconds()  # negative: the heartbeat is ahead of this clock


def progress_line(row: RunRow, width: int, now: datetime | None = None) -> Text:
    text = Text()
    if row.task is None:
        text.append(
            {
                "queued": "queued: waiting for the worker to start…",
                "running": "starting: loading the dataset and planning the stream…",
            }.get(row.status, "never started"),
            style="grey62",
        )
        return text
    if not row.active:
        text.append(f"{row.tasks_done}/{row.n_tasks} tasks done", style="bold")
        return text
    text.append(f"task {row.task + 1}/{row.n_tasks} ", style="bold")
    text.append(f"{row.phase or ''} ", style="cyan")
    frac = row.phase_fraction or 0.0
    unit = "candidates" if row.phase == "memory update" else "samples"  # (scored for their uncertainty)
    tail = Text(f" {frac:4.0%}  {row.phase_done:,}/{row.phase_total:,} {unit}")
    if row.samples_per_s:
        tail.append(f" · {row.samples_per_s:,.0f} {unit}/s", style="bold")
    if row.eta_s is not None:
        tail.append(f" · ETA {duration(row.eta_s)}")
    age = heartbeat_age(row, now)
    if age is not None and age < -2:  # the worker's clock runs ahead of this one (or this one jumped back)
        tail.append(f" · heartbeat {-age:.0f} s ahead of this clock", style="yellow")
    elif age is not None:
        tail.append(f" · heartbeat {max(age, 0):.0f} s ago", style="bold red" if age > 10 else "grey62")
    text.append_text(bar(frac, max(6, min(40, width - len(text) - len(tail) - 1))))
    text.append_text(tail)
    return text


class RunHeader(Static):
    """Identity, live progress (task, phase, bar, samples/s, ETA), the system load and the error line. Bound to
    the run page's `view` and `now`; `notice` is a (text, style) line under it (a store problem,
    a vanished run)."""

    DEFAULT_CSS = css_beside(__file__)

    view: reactive[RunView | None] = reactive(None)
    now: reactive[datetime | None] = reactive(None)  # the heartbeat's age moves on with it
    notice: reactive[tuple[str, str] | None] = reactive(None)
    line_count: reactive[int] = reactive(0)  # computed: the header's height

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("reading the run…", **kwargs)

    def compute_line_count(self) -> int:
        """The lines `render` draws (before wrapping)."""
        if self.view is None:
            return 1
        return 3 + bool(self.view.system) + bool(self.view.row.error) + (self.notice is not None)

    def watch_line_count(self) -> None:
        """Re-layout the screen only when the header's height changes (an error line came or went)."""
        self.refresh(layout=True)

    def render(self) -> Text:
        notice = Text(*self.notice) if self.notice is not None else None
        if self.view is None:
            return notice or Text("reading the run…", style="grey62")
        text = describe(self.view)
        text.append("\n")
        text.append_text(progress_line(self.view.row, self.size.width, self.now))
        if self.view.system:  # the system load its supervisor sampled (issue 42)
            text.append(f"\nsystem: {self.view.system}", style="grey62")
        if self.view.row.error:
            text.append("\n")
            text.append(f"{self.view.row.status}: ", style="bold red")
            text.append(self.view.row.error, style="red")
        if notice is not None:
            text.append("\n")
            text.append_text(notice)
        return text
