"""Command palette (ctrl+p): open, stop, resume or compare any run by typing part of its description."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .console import Console
from .data import RunRow
from .study import study_of


def describe(row: RunRow) -> str:
    """How the palette names a run so that a sweep's runs differ: `run 17 “study” · rm · K=500 ·
    seed 2 · epochs=8 · #base · finished` (its name, else its preset; the overrides and tags)."""
    parts = [
        f"run {row.id} “{row.name}”" if row.name else f"run {row.id} {row.preset or '—'}",
        row.method,
        f"K={row.memory_size}",
        f"seed {row.seed}",
    ]
    if row.overrides_text:
        parts.append(row.overrides_text)
    if row.tags:
        parts.append(" ".join(f"#{t}" for t in row.tags))
    parts.append(row.status)
    return " · ".join(parts)


def searched(row: RunRow, title: str) -> str:
    """What a query is matched against: the title, the preset and the run's note."""
    return " ".join(p for p in (title, row.preset or "", row.note or "") if p)


class RunCommands(Provider):
    """`open run 12 …`, `stop run 12 …`, `resume run 12 …`, `select run 12 …` for every run of
    the latest read, found by id, name, tag, note, method, override..."""

    def _commands(self) -> list[tuple[str, str, Callable[[], Any], str]]:
        app: Console = self.app  # type: ignore[assignment]  # the App, through its face towards its pages
        commands: list[tuple[str, str, Callable[[], Any], str]] = []
        studies = dict.fromkeys(name for row in reversed(app.rows) if (name := study_of(row.tags)) is not None)
        for name in studies:  # (the studies of the runs read: no store read here)
            commands.append(
                (
                    f"Open study {name}",
                    "A `rmconsole tune` study: its trials, history, importance, parallel coordinates",
                    partial(app.open_study, name),
                    "",
                )
            )
        for row in reversed(app.rows):
            what = describe(row)
            note = f" · note: {row.note}" if row.note else ""
            commands.append(
                (
                    f"Open {what}",
                    "Task stream, memory, accuracy and log" + note,
                    partial(app.open_run, row.id),
                    row.note or "",
                )
            )
            commands.append(
                (
                    f"Select {what}" if row.id not in app.selected else f"Unselect {what}",
                    "Toggle it for Compare",
                    partial(app.toggle_selected, row.id),
                    row.note or "",
                )
            )
            if row.active:
                commands.append(
                    (
                        f"Stop {what}",
                        "SIGTERM, then SIGKILL after a grace period",
                        partial(app.confirm_stop, row.id),
                        row.note or "",
                    )
                )
            elif row.status in ("failed", "stopped"):
                commands.append(
                    (
                        f"Resume {what}",
                        "Continue from its last task checkpoint",
                        partial(app.resume_run, row.id),
                        row.note or "",
                    )
                )
        return commands

    async def discover(self) -> Hits:
        for title, help_text, callback, _ in self._commands()[:30]:
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback, note in self._commands():
            score = matcher.match(title)
            if score <= 0 and note and query.lower() in note.lower():
                score = 0.5  # found by its note (not in the title: shown in the help line)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)
