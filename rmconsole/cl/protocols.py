"""Which protocol a run follows, declared once: each stream names its protocol.

- "task": the RM paper's task-based schedule (PROTOCOL §2): a stream of tasks, each trained
  then evaluated; A_last / A_avg / F_last / I_last.
- "task-free": the follow-up's i-Blurry / Si-Blurry streams (PROTOCOL §9): trained sample by
  sample with anytime evaluation; A_auc and the class-wise F_last.

Everything that asks "is this run task-free" (config checks, the loop, the methods, the store's
summaries, the reports, the TUI) asks `protocol_of` here. Plain Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Protocol = Literal["task", "task-free"]
PROTOCOLS: tuple[Protocol, ...] = ("task", "task-free")

STREAM_PROTOCOL: dict[str, Protocol] = {
    "online": "task",  # one pass over each task's stream, then E epochs on the memory
    "offline": "task",  # E epochs over each task's stream and the memory
    "iblurry": "task-free",  # the follow-up's i-Blurry-N-M stream
    "siblurry": "task-free",  # Si-Blurry's stream
}
TASK_FREE_STREAMS = tuple(s for s, p in STREAM_PROTOCOL.items() if p == "task-free")


def protocol_of(stream_or_config: str | Mapping[str, Any] | Any) -> Protocol:
    """The protocol of a stream name, of a stored config dict (a run of any version: no stream
    key means the RM paper's online stream) or of a validated config (its `.stream`)."""
    if isinstance(stream_or_config, str):
        stream = stream_or_config
    elif isinstance(stream_or_config, Mapping):
        stream = str(stream_or_config.get("stream") or "online")
    else:
        stream = str(getattr(stream_or_config, "stream", "online"))
    return STREAM_PROTOCOL.get(stream, "task")


def is_task_free(stream_or_config: str | Mapping[str, Any] | Any) -> bool:
    return protocol_of(stream_or_config) == "task-free"


def setting_label(config: Mapping[str, Any]) -> str:
    """A run's stream as its protocol names it: `blurry10 online` (the RM paper's task protocol),
    `iblurry50-10 task-free` (i-Blurry-N-M: N% disjoint classes, M% blurry). One label for the
    run's header, `run`'s first line and `presets`."""
    stream = str(config.get("stream") or "online")
    if is_task_free(stream):
        return f"{stream}{config.get('disjoint_classes', 50)}-{config.get('blurry', 10)} task-free"
    return f"blurry{config.get('blurry', 10)} {stream}"
