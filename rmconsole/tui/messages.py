"""Messages the store-reading threads and the launcher post to the UI thread."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from .data import CompareView, RunRow, RunsDelta, RunView, StudyView


@dataclass
class RunsLoaded(Message):
    """A fresh read of every run, for the runs table; `changed` is False when nothing moved;
    `delta`: the rows that changed and the runs that left (None: look at every row)."""

    rows: list[RunRow]
    changed: bool = True
    delta: RunsDelta | None = None


@dataclass
class RunLoaded(Message):
    """A fresh read of one run, plus the log lines appended since the last read."""

    view: RunView
    log_lines: list[str]


@dataclass
class CompareLoaded(Message):
    view: CompareView


@dataclass
class StudyLoaded(Message):
    view: StudyView


@dataclass
class RunVanished(Message):
    """The run a screen shows was deleted from the store."""

    run_id: int


@dataclass
class StoreProblem(Message):
    """A read failed (locked, unreachable); the screen keeps its last data and retries."""

    text: str


@dataclass
class StoreOk(Message):
    """A read succeeded after a problem."""


@dataclass
class RunLaunched(Message):
    """The launcher stored a run and started its worker."""

    run_id: int
    preset: str


@dataclass
class LaunchFailed(Message):
    text: str


@dataclass
class RunStopped(Message):
    run_id: int
    status: str


@dataclass
class SweepLaunched(Message):
    """A grid of runs was stored and its queue runner started."""

    sweep_id: str
    n_runs: int
    shape: str
