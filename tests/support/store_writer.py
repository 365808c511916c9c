"""One worker-like writer for the concurrency test: `python store_writer.py GO_FILE N TAG`.

Opens the store only when GO_FILE appears (so that all writers create the schema at the same
instant), then writes what a worker writes: a run, its start, a heartbeat per step (and from a second
thread all along, as the worker's heartbeat thread does), a memory snapshot per step, a task
result every fifth step, and its end. Prints the run id.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from rmconsole import store
from rmconsole.cl.events import TaskOutcome, TaskPlan


def main() -> None:
    go, steps, tag = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    Path(f"{go}.ready-{tag}").touch()
    parent, deadline = os.getppid(), time.monotonic() + 300
    while not go.exists():
        if os.getppid() != parent or time.monotonic() > deadline:  # the test went away
            sys.exit("no go signal")
        time.sleep(0.001)
    config = {"method": "rm", "dataset": "digits", "seed": 1, "n_tasks": steps // 5, "memory_size": 200}
    run_id = store.create_run(config, f"writer-{tag}")
    store.update_run(run_id, status="running", heartbeat_at=store.utcnow())
    plans = [TaskPlan(t, 100, [t], [10] * 10, f"{tag}-{t}") for t in range(steps // 5)]
    store.record_start(run_id, plans, list(range(10)), [str(c) for c in range(10)], ["normalize"])
    beats, done = [], threading.Event()

    def heartbeat() -> None:  # like the worker's heartbeat thread: its own connection, all the time
        while not done.wait(0.005):
            beats.append(store.heartbeat(run_id, heartbeat_at=store.utcnow(), samples_per_s=float(len(beats))))

    thread = threading.Thread(target=heartbeat)
    thread.start()
    for i in range(steps):
        status = store.heartbeat(run_id, phase="memory", phase_done=i, phase_total=steps, heartbeat_at=store.utcnow())
        assert status == "running", status
        store.record_memory(run_id, i, [i] * 10, 20, {"writer": tag})
        if i % 5 == 4:
            t = i // 5
            store.record_task(
                run_id, TaskOutcome(t, 50.0 + t, [50.0] * (steps // 5), [50.0] * 10, list(range(10)), 0.1)
            )
    done.set()
    thread.join()
    assert beats and set(beats) == {"running"}, beats[-3:]
    assert store.finish_run(run_id, "finished", only_from=("running",))
    print(run_id)


if __name__ == "__main__":
    main()
