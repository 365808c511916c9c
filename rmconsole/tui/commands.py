"""Command palette (ctrl+p): open, stop, resume or compare any run by typing part of its description."""

from __future__ import annotations

from functools import partial
from textual.command import DiscoveryHit, Hit, Hits, Provider

from .console import Console


class RunCommands(Provider):
    """`open run 12 …`, `stop run 12 …`, `resume run 12 …`, `select run 12 …` for every run of the latest read."""

    def _commands(self) -> list[tuple[str, str, object]]:
        app: Console = self.app  # type: ignore[assignment]
        commands = []
        for row in reversed(app.rows):
            what = f"run {row.id} · {row.preset or '—'} · {row.method} · K={row.memory_size} · seed {row.seed} · {row.status}"
            commands.append((f"Open {what}", "Task stream, memory, accuracy and log", partial(app.open_run, row.id)))
            commands.append((f"Select {what}" if row.id not in app.selected else f"Unselect {what}",
                             "Toggle it for Compare", partial(app.toggle_selected, row.id)))
            if row.active:
                commands.append((f"Stop {what}", "SIGTERM, then SIGKILL after a grace period",
                                 partial(app.confirm_stop, row.id)))
            elif row.status in ("failed", "stopped"):
                commands.append((f"Resume {what}", "Continue from its last task checkpoint",
                                 partial(app.resume_run, row.id)))
        return commands

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands()[:30]:
            yield DiscoveryHit(title, callback, help=help_text)  # type: ignore[arg-type]

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)  # type: ignore[arg-type]
