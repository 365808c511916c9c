"""Every RM variant the paper studies runs to the end on digits, and does what it says.

Short runs (1 memory epoch): uncertainty measures (Table 7), memory policies (Table 6),
augmentation settings (Table 4), settings blurry 0/10/30 x online/offline (Table 3), the
RM / RM w/o DA presets, and the honest vs best-over-epochs accuracy.
"""

from __future__ import annotations

import pytest
import torch

from rmconsole.cl.catalog import MEASURES, MEMORY_POLICIES
from rmconsole.cl.data import load_digits
from rmconsole.cl.events import Reporter
from rmconsole.cl.loop import run_protocol
from rmconsole.config import load_config

DIGITS = load_digits()
K = 200


class Recorder(Reporter):
    def __init__(self) -> None:
        self.pipeline: list[str] = []
        self.phases: list[tuple[int, str]] = []
        self.memories: list[tuple[int, list[int], int, dict]] = []
        self.checkpoints: list[dict] = []

    def run_started(self, plans, class_order, class_names, pipeline):
        self.pipeline = pipeline

    def phase(self, task, name, total):
        self.phases.append((task, name))

    def memory_updated(self, task, histogram, slots_per_class, info):
        self.memories.append((task, histogram, slots_per_class, info))

    def task_finished(self, outcome, checkpoint):
        self.checkpoints.append(checkpoint)


def _run(**overrides):
    _, cfg = load_config(None, {"epochs": 1, **overrides})
    rec = Recorder()
    outcomes = run_protocol(cfg, DIGITS, torch.device("cpu"), rec)
    assert len(outcomes) == 5 and all(0 <= o.accuracy <= 100 for o in outcomes)
    assert [m[0] for m in rec.memories] == [0, 1, 2, 3, 4]
    return outcomes, rec


@pytest.mark.parametrize("measure", MEASURES)
def test_each_uncertainty_measure_runs(measure: str) -> None:
    _, rec = _run(uncertainty=measure)
    assert "note" in rec.memories[0][3]  # task 0: class-balanced random, no scoring
    for _task, hist, _slots, info in rec.memories[1:]:
        assert sum(hist) == K and info["measure"] == measure
        assert sum(info["candidates_uncertainty"]) > sum(info["chosen_uncertainty"]) == K
    assert rec.memories[-1][1] == [K // 10] * 10  # every class has >= k_c candidates by the last task


@pytest.mark.parametrize("policy", MEMORY_POLICIES)
def test_each_memory_policy_runs(policy: str) -> None:
    _, rec = _run(memory_policy=policy)
    assert all(m[3]["policy"] == policy and sum(m[1]) == K for m in rec.memories)
    if policy in ("uncertainty", "class_balanced", "prototype"):
        assert rec.memories[-1][1] == [K // 10] * 10
    if policy == "reservoir":
        assert rec.checkpoints[-1]["method"]["memory"]["seen"] == len(DIGITS.train)


AUGMENT = {
    "none": "none",
    "cutmix": "cutmix",
    "randaug": "randaug",
    "autoaug": "autoaug",
    "cutmix+autoaug": "cutmix+autoaug",
}


@pytest.mark.parametrize("setting", AUGMENT)
def test_each_augmentation_setting_runs_and_is_recorded(setting: str) -> None:
    _, rec = _run(augment=AUGMENT[setting])
    assert any(s.startswith("autoaugment") for s in rec.pipeline) == ("autoaug" in setting)
    assert any(s.startswith("randaugment") for s in rec.pipeline) == ("randaug" in setting)
    assert any(s.startswith("cutmix") for s in rec.pipeline) == ("cutmix" in setting)


@pytest.mark.parametrize("stream", ["online", "offline"])
@pytest.mark.parametrize("blurry", [0, 10, 30])
def test_each_setting_runs(blurry: int, stream: str) -> None:
    outcomes, rec = _run(blurry=blurry, stream=stream)
    names = {name for _, name in rec.phases}
    if stream == "online":
        assert {"stream", "memory update", "memory"} <= names and "offline" not in names
    else:
        assert {"offline", "memory update"} <= names and "stream" not in names
    evaluated = [len(o.eval_classes) for o in outcomes]
    assert evaluated == ([2, 4, 6, 8, 10] if blurry == 0 else [10] * 5)
    if blurry == 0:  # disjoint: the memory holds only classes seen so far
        assert sum(rec.memories[0][1][2:]) == 0 and rec.memories[0][1][:2] == [100, 100]


def test_rm_and_rm_without_da_presets_differ_only_in_augmentation() -> None:
    for preset in ("mnist-blurry10-online", "cifar10-blurry10-online", "cifar100-blurry10-online", "imagenet-blurry10"):
        _, rm = load_config(preset)
        _, noda = load_config(f"{preset}-noda")
        assert rm.augment == ("cutmix", "autoaug") and noda.augment == ()
        differing = {k for k, v in rm.to_dict().items() if noda.to_dict()[k] != v}
        assert differing == {"augment"}


def test_reset_head_recreates_the_classifier_each_task() -> None:
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup, Task, method_class

    for reset in (False, True):
        _, cfg = load_config(None, {"epochs": 1, "reset_head": reset})
        proto = build_protocol(cfg, DIGITS)
        setup = Setup(
            cfg,
            DIGITS,
            proto.train_labels,
            proto.test_labels,
            proto.groups,
            torch.device("cpu"),
            make_augmenter(cfg, DIGITS, torch.device("cpu")),
        )
        rm = method_class("rm")(setup)
        rm.before_task(Task(0, proto.tasks[0], 5))
        rm.learn_task(Task(0, proto.tasks[0], 5))
        head, body = rm.model.fc.weight.clone(), rm.model.features[1].weight.clone()
        rm.before_task(Task(1, proto.tasks[1], 5))
        assert torch.equal(rm.model.features[1].weight, body)  # the features are kept either way
        assert torch.equal(rm.model.fc.weight, head) != reset
        assert rm.optimizer is not None  # and the optimiser trains the head it holds now
        assert any(p is rm.model.fc.weight for g in rm.optimizer.param_groups for p in g["params"])


def test_best_over_epochs_is_recorded_beside_the_honest_accuracy() -> None:
    """eval_every_epoch only adds a figure: the last-epoch accuracies are bit-identical, and the
    best-over-epochs figure (test-set selected) is never below the last epoch's."""
    honest, _ = _run(epochs=3)
    both, _ = _run(epochs=3, eval_every_epoch=True)
    assert [o.accuracy for o in both] == [o.accuracy for o in honest]
    assert all(o.best_epoch_accuracy is None for o in honest)
    assert all(o.best_epoch_accuracy is not None and o.best_epoch_accuracy >= o.accuracy for o in both)


def test_best_over_epochs_is_stored_and_shown_under_its_own_name(isolated_home) -> None:
    """Through the real CLI, worker and SQLite store: the task rows carry both figures, the
    metrics keep A_last (last epoch) and A_last_best_epoch apart, and `show` labels the latter."""
    import json

    from conftest import rmconsole
    from support.cli import in_process

    done = rmconsole("run", "--set", "epochs=2", "--set", "n_tasks=2", "--set", "eval_every_epoch=true")
    assert done.returncode == 0, done.stdout + done.stderr
    detail = json.loads(in_process("show", "1", "--json").stdout)
    tasks, metrics = detail["tasks"], detail["metrics"]
    assert metrics["A_last"] == tasks[-1]["accuracy"]
    assert metrics["A_last_best_epoch"] == tasks[-1]["best_epoch_accuracy"] >= metrics["A_last"]
    assert all(t["best_epoch_accuracy"] >= t["accuracy"] for t in tasks)
    shown = in_process("show", "1").stdout
    assert "A_last " in shown and "best-over-epochs (test-set selected" in shown
    listed = json.loads(in_process("runs", "--json").stdout)[0]["metrics"]
    assert listed["A_last"] == metrics["A_last"] and listed["A_last_best_epoch"] == metrics["A_last_best_epoch"]
    assert "best-over-epochs (test-set selected" in done.stdout  # the run's own summary labels it too


def test_without_the_flag_no_best_epoch_figure_is_stored() -> None:
    from rmconsole.store.runs import summarize_results
    from rmconsole.store.tables import TaskResult

    rows = [
        TaskResult(
            run_id=1,
            task=t,
            accuracy=80.0 + t,
            accuracy_row=[80.0] * 3,
            class_accuracy=[80.0],
            eval_classes=[0],
            seconds=1.0,
            best_epoch_accuracy=None,
        )
        for t in range(3)
    ]
    assert "A_last_best_epoch" not in summarize_results(rows) and summarize_results(rows)["A_last"] == 82.0
    rows[-1].best_epoch_accuracy = 90.0  # only some tasks recorded it (a resumed run): still not reported
    assert "A_last_best_epoch" not in summarize_results(rows)
