"""A store with fixed, hand-made content for TUI tests and snapshots: a finished run, a
running run (mid-task, fresh heartbeat, on another host so no reaper touches it), a failed
run with a traceback in its log, and a queued run. Everything (dates, numbers, log text) is
fixed so screenshots are stable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rmconsole import store
from rmconsole.cl.events import TaskOutcome, TaskPlan
from rmconsole.config import load_config
from rmconsole.runner import launch

T0 = datetime(2026, 1, 15, 9, 0, 0, tzinfo=UTC)
CLASS_ORDER = [5, 6, 1, 2, 0, 8, 9, 3, 7, 4]
NAMES = [str(i) for i in range(10)]
PIPELINE = [
    "random_crop(padding=1)",
    "horizontal_flip(p=0.5)",
    "autoaugment(policy=cifar10, per-sample)",
    "normalize",
    "cutmix(p=0.5, alpha=1.0, per-batch)",
]


def plans() -> list[TaskPlan]:
    out = []
    for t in range(5):
        composition = [3] * 10
        composition[2 * t], composition[2 * t + 1] = 131 + t, 130 - t
        out.append(TaskPlan(t, sum(composition), [2 * t, 2 * t + 1], composition, f"hash{t}"))
    return out


ACCURACY_ROWS = [
    [98.0, 4.0, 1.0, 0.0, 20.0],
    [92.5, 94.0, 30.0, 2.0, 40.0],
    [88.0, 86.5, 95.5, 25.0, 60.0],
    [76.0, 88.5, 95.0, 92.0, 55.0],
    [78.5, 88.0, 97.0, 78.5, 87.5],
]
ACCURACIES = [27.5, 53.0, 71.0, 81.5, 86.0]


def memory_histogram(task: int) -> list[int]:
    seen = 2 * (task + 1)
    hist = [200 // seen if c < seen else 2 for c in range(10)]
    hist[0] += 200 - sum(hist)
    return hist


def _outcome(t: int) -> TaskOutcome:
    row = ACCURACY_ROWS[t]
    class_acc: list[float | None] = [v for v in row for _ in range(2)]
    return TaskOutcome(t, ACCURACIES[t], row, class_acc, list(range(2 * (t + 1))), 1.25)


def _fill(run_id: int, tasks_done: int, memory_updates: int) -> None:
    store.record_start(run_id, plans(), CLASS_ORDER, NAMES, PIPELINE)
    for t in range(memory_updates):
        info: dict = {"policy": "uncertainty", "seconds": 0.05}
        if t == 0:
            info["note"] = "task 0: class-balanced random (authors' code)"
        else:
            info.update(
                {
                    "measure": "randaug",
                    "views": 12,
                    "candidates_uncertainty": [40, 62, 75, 70, 58, 50, 44, 36, 24, 14, 8, 4, 2],
                    "chosen_uncertainty": [16, 25, 31, 29, 24, 21, 18, 15, 10, 6, 3, 1, 1],
                }
            )
        store.record_memory(run_id, t, memory_histogram(t), 200 // (2 * (t + 1)) if t < 4 else 20, info)
    for t in range(tasks_done):
        store.record_task(run_id, _outcome(t))


def _log(run_id: int, lines: list[str]) -> str:
    path = launch.log_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def build(n_extra_finished: int = 0) -> dict[str, int]:
    """Create the four runs (plus extra finished ones); returns their ids by role."""
    ids: dict[str, int] = {}
    _, cfg = load_config("digits-blurry10-online", {"epochs": 8})
    finished = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    _fill(finished, 5, 5)
    store.update_run(
        finished,
        status="finished",
        created_at=T0,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=30),
        host="lab-1",
        pid=4242,
        task=4,
        phase="done",
        phase_done=0,
        phase_total=360,
        heartbeat_at=T0,
        log_path=_log(
            finished,
            [
                "stream: 5 tasks, sizes [288, 288, 288, 288, 288]",
                *[f"task {t + 1}/5: accuracy {a:.2f}% (1.2 s)" for t, a in enumerate(ACCURACIES)],
                f"run {finished} finished",
            ],
        ),
    )
    ids["finished"] = finished

    _, cfg = load_config("digits-blurry10-online", {"epochs": 32, "seed": 2, "memory_policy": "uncertainty"})
    running = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    _fill(running, 2, 3)
    store.update_run(
        running,
        status="running",
        created_at=T0 + timedelta(minutes=1),
        started_at=T0,
        host="lab-2",
        pid=999999,
        task=2,
        phase="stream",
        phase_done=230,
        phase_total=576,
        samples_per_s=1840.0,
        eta_s=12.0,
        heartbeat_at=store.utcnow(),
        log_path=_log(
            running,
            [
                "stream: 5 tasks, sizes [288, 288, 288, 288, 288]",
                "task 1/5: stream (288 samples)",
                "task 1/5: accuracy 27.50% (1.2 s)",
                "task 2/5: stream (576 samples)",
                "task 2/5: accuracy 53.00% (1.2 s)",
                "task 3/5: stream (576 samples)",
            ],
        ),
    )
    ids["running"] = running

    _, cfg = load_config("digits-blurry10-online", {"method": "finetune", "memory_size": 500})
    failed = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    _fill(failed, 1, 1)
    store.update_run(
        failed,
        status="failed",
        created_at=T0 + timedelta(minutes=2),
        host="lab-1",
        pid=4343,
        task=1,
        phase="memory",
        phase_done=10,
        phase_total=100,
        error="RuntimeError: CUDA out of memory (simulated)",
        log_path=_log(
            failed,
            [
                "task 1/5: accuracy 27.50% (1.2 s)",
                "Traceback (most recent call last):",
                '  File "worker.py", line 1, in train',
                "RuntimeError: CUDA out of memory (simulated)",
                f"run {failed} failed: RuntimeError: CUDA out of memory (simulated)",
            ],
        ),
    )
    ids["failed"] = failed

    _, cfg = load_config("digits-blurry10-online", {"seed": 3})
    queued = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    store.update_run(queued, created_at=T0 + timedelta(minutes=3), host="lab-2", n_tasks=5)
    ids["queued"] = queued

    for i in range(n_extra_finished):
        _, cfg = load_config("digits-blurry10-online", {"seed": 10 + i})
        extra = store.create_run(cfg.to_dict(), "digits-blurry10-online")
        _fill(extra, 5, 5)
        store.update_run(extra, status="finished", created_at=T0, host="lab-1")
    return ids
