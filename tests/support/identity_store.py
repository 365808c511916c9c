"""A store of runs that differ the ways a researcher's runs do: names, tags, notes, overrides of
the preset, finished and partial metrics, per-epoch rows, an archived run and a sweep. Written
through the real store API (the same calls the launcher and the worker make)."""

from __future__ import annotations

import math
from datetime import timedelta

from rmconsole import store
from rmconsole.cl.events import TaskOutcome
from rmconsole.config import load_config, overrides_of
from support import tui_store

PRESET = "digits-blurry10-online"


def epoch_rows(task: int, epochs: int, loss0: float = 2.3, lr: float = 0.05) -> list[dict]:
    """A stream pass and `epochs` memory epochs of one task, with a falling loss and the cosine lr."""
    from rmconsole.cl.schedule import epoch_lr

    rows = [
        dict(
            task=task,
            phase="stream",
            epoch=0,
            epochs=1,
            loss=loss0,
            lr=0.1 * lr,
            samples=288,
            seconds=0.2,
            samples_per_s=1440.0,
        )
    ]
    for e in range(epochs):
        rows.append(
            dict(
                task=task,
                phase="memory",
                epoch=e,
                epochs=epochs,
                loss=loss0 * math.exp(-e / 6) + 0.1,
                lr=epoch_lr(e, lr),
                samples=200,
                seconds=0.1,
                samples_per_s=2000.0 - 3 * e,
            )
        )
    return rows


def stored(
    overrides: dict,
    *,
    name: str | None = None,
    tags: list[str] | None = None,
    tasks_done: int = 5,
    status: str = "finished",
    note: str | None = None,
    sweep: str | None = None,
    a_shift: float = 0.0,
    epochs: int = 16,
) -> int:
    """A run of the digits preset with these overrides, as the launcher stores it, with results."""
    _, cfg = load_config(PRESET, overrides)
    config = cfg.to_dict()
    run_id = store.create_run(config, PRESET, sweep, name=name, tags=tags, overrides=overrides_of(PRESET, config))
    store.record_start(run_id, tui_store.plans(), tui_store.CLASS_ORDER, tui_store.NAMES, tui_store.PIPELINE)
    for t in range(tasks_done):
        row = [min(v + a_shift, 100.0) for v in tui_store.ACCURACY_ROWS[t]]
        store.record_epochs(run_id, epoch_rows(t, epochs))
        store.record_memory(run_id, t, tui_store.memory_histogram(t), 20, {"policy": "uncertainty"})
        store.record_task(
            run_id,
            TaskOutcome(
                t,
                min(tui_store.ACCURACIES[t] + a_shift, 100.0),
                row,
                [v for v in row for _ in range(2)],
                list(range(2 * (t + 1))),
                1.5,
            ),
        )
    fields = dict(status=status, created_at=tui_store.T0 + timedelta(minutes=run_id), host="lab-1", note=note)
    if status == "running":
        fields.update(
            task=tasks_done,
            phase="memory",
            phase_done=120,
            phase_total=3200,
            samples_per_s=1900.0,
            heartbeat_at=store.utcnow(),
            host="lab-2",
            pid=999999,
        )
    store.update_run(run_id, **fields)
    return run_id


def build() -> dict[str, int]:
    ids = {
        "base": stored({"epochs": 16}, name="baseline", tags=["base"]),
        "k500": stored({"epochs": 16, "memory_size": 500}, tags=["base", "k500"], a_shift=6.0),
        "noaug": stored(
            {"epochs": 64, "augment": "none"},
            name="no augmentation",
            tags=["ablation"],
            a_shift=-9.0,
            note="augmentation off: compare with baseline",
        ),
        "partial": stored(
            {"epochs": 64}, name="long run", tags=["ablation"], tasks_done=3, status="running", a_shift=15.0
        ),
        "stopped": stored({"epochs": 8, "seed": 2}, tasks_done=2, status="stopped", a_shift=3.0),
        "old": stored({"epochs": 4}, name="old try", tags=["draft"], a_shift=-20.0),
    }
    store.set_archived([ids["old"]])
    for seed in (1, 2):
        ids[f"sweep{seed}"] = stored(
            {"epochs": 16, "seed": seed, "method": "er"},
            tags=["sweep"],
            tasks_done=0,
            status="queued",
            sweep="20260115-090000-abcd",
        )
    return ids
