"""A six-trial `rmconsole tune` study made in-process without training: its trials are runs
written through store calls (two tasks each, validation figures only, as a trial evaluates no
test set) and told to Optuna as the study driver tells them (runner/tune.py): five complete, the
last one pruned after its first task. The values follow lr (log) closely and memory_size hardly
at all, so the importance has an order to show. Everything is fixed (values, dates)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import optuna
from optuna.trial import TrialState

from rmconsole import store
from rmconsole.cl.events import TaskOutcome
from rmconsole.runner import tune as tuning

T0 = datetime(2026, 1, 15, 9, 0, 0, tzinfo=UTC)
LRS = (1e-4, 4e-4, 1.6e-3, 6.3e-3, 2.5e-2, 1e-1)
KS = (100, 285, 248, 211, 174, 137)
FINAL = (41.0, 49.0, 57.0, 65.0, 73.0)  # val_A_last of the five complete trials
PRUNED_AT = 12.5  # the pruned trial's validation accuracy after task 1


def build(name: str = "look") -> list[int]:
    """The study `name` and its trials' runs; the run ids in trial order."""
    spec, new = tuning.prepare(
        name,
        pairs=["epochs=1", "n_tasks=2", "val_fraction=0.2", 'augment="none"'],
        params=["lr=log:1e-4..1e-1", "memory_size=int:100..500"],
        metric="val_A_last",
        trials=6,
        sampler="random",
    )
    assert new
    study = tuning.open_study(spec, create=True)
    distributions = {p.key: p.distribution() for p in spec.params}
    config = {"method": "rm", "dataset": "digits", "seed": 1, "n_tasks": 2, "val_fraction": 0.2}
    ids = []
    for number, (lr, k) in enumerate(zip(LRS, KS)):
        pruned = number == len(FINAL)
        run_id = store.create_run(
            {**config, "lr": lr, "memory_size": k},
            "digits-blurry10-online",
            name=tuning.trial_name(name, number),
            tags=[tuning.study_tag(name), *([tuning.PRUNED_TAG] if pruned else [])],
        )
        ids.append(run_id)
        values = [PRUNED_AT] if pruned else [FINAL[number] - 6.0, FINAL[number]]
        for task, value in enumerate(values):
            store.record_task(
                run_id,
                TaskOutcome(task, None, None, None, list(range(2 * (task + 1))), 1.0, val_accuracy=value),
            )
        start = T0 + timedelta(minutes=number)
        store.update_run(
            run_id,
            status="stopped" if pruned else "finished",
            created_at=start,
            started_at=start,
            finished_at=start + timedelta(seconds=30),
            task=len(values) - 1,
            host="lab-1",
        )
        study.add_trial(  # as the driver reports and tells it (one value per task; the metric once finished)
            optuna.trial.create_trial(
                params={"lr": lr, "memory_size": k},
                distributions=distributions,
                value=None if pruned else FINAL[number],
                intermediate_values=dict(enumerate(values)),
                user_attrs={tuning.RUN_ATTR: run_id},
                state=TrialState.PRUNED if pruned else TrialState.COMPLETE,
            )
        )
    return ids
