"""Pins of the task-free protocol's science (cl/online.py, cl/metrics_anytime.py, the catalogue's
run summaries) at values where a wrong rule shows: test sets where unseen classes exist,
anytime points that cover different numbers of classes (issue 29; tools/mutation.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from support.online_helpers import Recorder, config

from rmconsole.cl import metric_catalog as C
from rmconsole.cl import metrics_anytime as MA
from rmconsole.cl import online
from rmconsole.cl import results as R
from rmconsole.cl.data import Dataset, TensorImages
from rmconsole.cl.methods import method_class


def skewed_data(train_per_class: int = 12, seed: int = 0) -> Dataset:
    """10 classes, the train set balanced, the test set not: class c has c + 1 test samples, so
    any rule that scores another set of samples (the train set, unseen classes) changes the
    share of each class in what is scored."""
    g = torch.Generator().manual_seed(seed)

    def split(counts: list[int]) -> TensorImages:
        labels = torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])
        labels = labels[torch.randperm(len(labels), generator=g)]
        return TensorImages((torch.rand(len(labels), 1, 8, 8, generator=g) * 255).to(torch.uint8), labels)

    return Dataset(
        "digits",
        split([train_per_class] * 10),
        split([c + 1 for c in range(10)]),
        [f"c{i}" for i in range(10)],
        (0.4,),
        (0.25,),
        crop_padding=1,
    )


def first_label_predictor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's method (ER) trains nothing and predicts label 0 (the stream's first class) for
    every image: its accuracy is then the share of label 0 among the samples scored."""
    base = method_class("er")

    class Constant(base):  # type: ignore[misc,valid-type]
        def online_observe(self, index: int, label: int) -> None:
            return None

        def predict(self, x: torch.Tensor) -> torch.Tensor:
            return torch.zeros(len(x), dtype=torch.long, device=x.device)

    monkeypatch.setattr(online, "method_class", lambda spec: Constant)


def test_anytime_evaluation_scores_the_test_samples_of_the_seen_classes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """(issue 29 a) Each anytime point is scored on the TEST samples of the classes the stream has
    shown so far (labels 0..n-1 by first appearance), never on unseen classes or train samples."""
    first_label_predictor(monkeypatch)
    data = skewed_data()
    cfg = config(method="er", eval_period=10, n_tasks=5)
    rec = Recorder()
    online.run_online(cfg, data, torch.device("cpu"), rec)
    proto = online.build_online_protocol(cfg, data)
    seq = proto.train_labels[torch.cat(proto.tasks)]
    test = proto.test_labels
    assert len(rec.points) == len(seq) // 10
    partial = 0
    for p in rec.points:
        seen = len(set(seq[: p.samples].tolist()))
        assert p.n_classes == seen
        share = 100.0 * int((test == 0).sum()) / int((test < seen).sum())
        assert p.accuracy == pytest.approx(share)
        partial += seen < 10
    assert partial >= 2  # points taken while unseen classes still existed in the test set
    # the task-end evaluations score the same scope (classes exposed by the stream)
    for outcome in rec.outcomes:
        seen = len(outcome.eval_classes)
        assert outcome.accuracy == pytest.approx(100.0 * int((test == 0).sum()) / int((test < seen).sum()))


class Counting(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.advanced: list[int] = []

    def advance(self, n: int) -> None:  # type: ignore[override]
        self.advanced.append(n)


def counting_method(monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, Any]]) -> None:
    """ER that trains nothing, predicts label 0, spends 3 image passes per sample it observes and
    records every hook the driver calls."""
    base = method_class("er")

    def nap(seconds: float) -> None:  # sleep, and record the time it really took (a busy machine oversleeps)
        began = time.perf_counter()
        time.sleep(seconds)
        calls.append(("spent", time.perf_counter() - began))

    class Hooks(base):  # type: ignore[misc,valid-type]
        def online_new_class(self, label: int) -> None:
            calls.append(("new_class", label))
            super().online_new_class(label)

        def online_observe(self, index: int, label: int) -> None:
            calls.append(("observe", index))
            self.cost += 3.0
            nap(0.0005)

        def online_before_eval(self) -> None:
            calls.append(("before_eval", None))
            nap(0.002)  # training time the driver must count as training

        def online_task_start(self, task: Any) -> None:
            calls.append(("task_start", task.index))

        def online_task_end(self, task: Any) -> None:
            calls.append(("task_end", task.index))
            nap(0.05)  # boundary work: training time too

        def predict(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.002)  # every evaluation takes measurable time
            return torch.zeros(len(x), dtype=torch.long, device=x.device)

    monkeypatch.setattr(online, "method_class", lambda spec: Hooks)


@pytest.mark.parametrize("budget", [None, 1.0])
def test_driver_calls_every_hook_counts_the_clock_and_checkpoints(
    monkeypatch: pytest.MonkeyPatch, budget: float | None
) -> None:
    """The driver's bookkeeping, against a rule written out here: the compute budget (a sample is
    skipped while passes spent > budget x arrivals: equality trains), the exposed classes (the
    stream's, skipped samples included), the hooks, the clock and the checkpoint."""
    calls: list[tuple[str, Any]] = []
    counting_method(monkeypatch, calls)
    data = skewed_data(train_per_class=40)  # 80 samples a task: progress is reported every 64
    cfg = config(method="er", eval_period=7, n_tasks=5, compute_budget=budget)
    rec = Counting()
    torch.manual_seed(123)
    began = time.perf_counter()
    outcomes = online.run_online(cfg, data, torch.device("cpu"), rec)
    elapsed = time.perf_counter() - began
    proto = online.build_online_protocol(cfg, data)
    stream = torch.cat(proto.tasks).tolist()
    labels = proto.train_labels[torch.cat(proto.tasks)].tolist()
    # the rule, written out
    cost, observed, skipped, new, exposed = 0.0, [], 0, [], 0
    seen: set[int] = set()
    for k, (i, y) in enumerate(zip(stream, labels), start=1):
        exposed = max(exposed, y + 1)
        if budget is not None and cost > budget * k:
            skipped += 1
            continue
        if y not in seen:
            seen.add(y)
            new.append(y)
        observed.append(i)
        cost += 3.0
    assert (skipped > 0) == (budget is not None)
    assert [c[1] for c in calls if c[0] == "observe"] == observed
    assert [c[1] for c in calls if c[0] == "new_class"] == new
    assert [c[1] for c in calls if c[0] == "task_start"] == [0, 1, 2, 3, 4]
    assert [c[1] for c in calls if c[0] == "task_end"] == [0, 1, 2, 3, 4]
    assert sum(1 for c in calls if c[0] == "before_eval") == len(stream) // 7 == len(rec.points)
    assert [p.samples for p in rec.points] == list(range(7, len(stream) + 1, 7))
    assert all(p.seconds == round(p.seconds, 4) and p.seconds >= 0 for p in rec.points)
    assert sum(rec.advanced) == len(stream) and len(rec.advanced) <= len(stream) // 64 + 5
    assert len(outcomes) == 5 and rec.outcomes == outcomes and len(rec.memories) == 5
    assert outcomes[-1].eval_classes == list(range(exposed))
    last = outcomes[-1].extra["online"]
    assert set(outcomes[-1].extra) == {"memory", "online"}
    assert last["samples_seen"] == len(stream) and last["samples_skipped"] == skipped
    assert last["samples_trained"] == len(observed) and last["image_passes"] == cost
    assert last["evaluations"] == len(rec.points)
    assert last["A_auc"] == pytest.approx(sum(p.accuracy for p in rec.points) / len(rec.points))
    assert last["train_seconds"] > 0 and last["eval_seconds"] > 0
    # the hooks' time (observing, before an evaluation, at a boundary) is all training time
    assert last["train_seconds"] >= sum(c[1] for c in calls if c[0] == "spent") - 2e-3
    # the anytime points' evaluation time plus the task ends' (5 x at least 2 ms)
    assert last["eval_seconds"] >= sum(p.seconds for p in rec.points) + 0.01 - 1e-4 * len(rec.points) - 2e-3
    assert last["train_seconds"] + last["eval_seconds"] <= last["wall_seconds"] + 2e-3 <= elapsed + 2e-3
    assert all(0 <= o.seconds <= elapsed for o in outcomes)
    assert sum(o.seconds for o in outcomes) >= last["wall_seconds"] - 2e-3
    # the checkpoint after each task: what resume reads
    for t, point in enumerate(rec.checkpoints):
        assert set(point) == {
            "task",
            "method",
            "augmenter",
            "torch_rng",
            "method_name",
            "stream_hashes",
            "online_clock",
            "compute",  # the FLOP ledger's counts (cl/compute.py): a resume continues them
        }
        assert point["task"] == t and point["method_name"] == "er"
        assert point["stream_hashes"] == [p.stream_hash for p in rec.plans]
    assert rec.checkpoints[-1]["online_clock"]["arrivals"] == len(stream)
    assert rec.checkpoints[-1]["online_clock"]["skipped"] == skipped
    assert [len(p.first_appearances) for p in rec.plans] == [len(f) for f in proto.first]
    # the run seeds torch itself: the model it builds does not depend on the caller's RNG
    torch.manual_seed(999)
    again = Counting()
    online.run_online(cfg, data, torch.device("cpu"), again)
    ours, theirs = rec.checkpoints[0]["method"]["model"], again.checkpoints[0]["method"]["model"]
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_a_auc_is_the_unweighted_mean_over_points_with_different_class_counts() -> None:
    """(issue 29 b) A_auc is the mean of the anytime accuracies, each point counting once, however
    many classes it covered (the follow-up's rule), in the catalogue the store asks and in the
    loop's own figure."""
    points = [R.AnytimePoint(0, 10, 90.0, 2), R.AnytimePoint(0, 20, 60.0, 4), R.AnytimePoint(0, 30, 30.0, 10)]
    rows = C.RunRows(config={"stream": "iblurry"}, anytime=points)
    assert rows.protocol == "task-free"
    unweighted = (90.0 + 60.0 + 30.0) / 3
    weighted = (90.0 * 2 + 60.0 * 4 + 30.0 * 10) / 16
    assert unweighted != pytest.approx(weighted)
    assert C.summarize(rows)["A_auc"] == pytest.approx(unweighted)
    assert C.BUILTINS["A_auc"].value(rows) == pytest.approx(unweighted)
    assert MA.area_under_curve([90.0, 60.0, 30.0]) == pytest.approx(60.0)
    assert MA.area_under_curve([]) is None
    clock = online.Clock(anytime_accuracies=[90.0, 60.0, 30.0])
    summary = online.online_summary(clock, _Counters())
    assert summary["A_auc"] == pytest.approx(unweighted)


class _Counters:
    online_steps = 7
    cost = 21.0


def test_online_summary_reports_the_clock() -> None:
    clock = online.Clock(
        arrivals=53,
        observed=43,
        skipped=10,
        exposed=3,
        train_seconds=2.00049,
        eval_seconds=0.50049,
        wall_seconds=3.25049,
        evaluations=4,
        anytime_accuracies=[50.0, 70.0],
    )
    s = online.online_summary(clock, _Counters())
    assert s == {
        "samples_seen": 53,
        "samples_trained": 43,
        "samples_skipped": 10,
        "train_seconds": 2.0,
        "eval_seconds": 0.5,
        "wall_seconds": 3.25,
        "train_samples_per_s": 21.5,
        "evaluations": 4,
        "evaluations_per_s": 7.99,
        "A_auc": 60.0,
        "optimiser_steps": 7,
        "image_passes": 21.0,
    }
    idle = online.online_summary(online.Clock(), _Counters())
    brief = online.online_summary(
        online.Clock(observed=3, train_seconds=0.5, evaluations=1, eval_seconds=0.8), _Counters()
    )
    assert brief["train_samples_per_s"] == 6.0 and brief["evaluations_per_s"] == 1.25
    assert idle["train_samples_per_s"] is None and idle["evaluations_per_s"] is None and idle["A_auc"] is None


def test_clock_state_round_trips_and_ignores_unknown_keys() -> None:
    clock = online.Clock(arrivals=5, exposed=2, anytime_accuracies=[1.0])
    state: dict[str, Any] = {**clock.state(), "anytime_sum": 3.0}
    again = online.Clock.from_state(state)
    assert again == clock


def test_class_forgetting_is_the_follow_ups_class_wise_rule() -> None:
    # class 0: never above 0 before the end -> skipped; class 1: best before the end 80 (not the
    # earlier 60), ends at 50 -> 30; class 2: best 40, ends None (not evaluated) -> counted as
    # 0 -> 40; class 3: only seen at the end -> skipped
    rows = [[0.0, 60.0, 40.0], [0.0, 80.0, None], [0.0, 50.0, None, 90.0]]
    assert MA.class_forgetting(rows) == pytest.approx((30.0 + 40.0) / 2)
    assert MA.class_forgetting(rows[:1]) is None
    assert MA.class_forgetting([[0.0], [0.0]]) is None
    assert MA.class_forgetting([[80.0, 10.0], [50.0, 30.0]]) == pytest.approx((30.0 - 20.0) / 2)
    # the best counts even after a 0 (class 0), and a best of 0.5 is above 0 (class 1)
    assert MA.class_forgetting([[0.0, 0.5], [70.0, 0.0], [20.0, 0.0]]) == pytest.approx((50.0 + 0.5) / 2)
    # a rise counts as negative forgetting (no clamp at 0)
    assert MA.class_forgetting([[20.0], [10.0], [50.0]]) == pytest.approx(-30.0)


# ------------------------------------------------------------------ the run summaries (catalogue)


def test_run_summaries_pin_every_built_in_rule() -> None:
    """The catalogue's per-run rules at values where a wrong one shows (3 tasks, drops that differ,
    top-k with one k, a count that stays an int)."""
    tasks = [
        R.TaskOutcome(
            0,
            90.0,
            [90.0, None, None],
            best_epoch_accuracy=91.0,
            topk=5,
            topk_accuracy=99.0,
            topk_accuracy_row=[99.0, None, None],
        ),
        R.TaskOutcome(
            1,
            70.0,
            [60.0, 80.0, None],
            best_epoch_accuracy=72.0,
            topk=5,
            topk_accuracy=95.0,
            topk_accuracy_row=[90.0, 97.0, None],
        ),
        R.TaskOutcome(
            2,
            50.0,
            [40.0, 70.0, 40.0],
            best_epoch_accuracy=55.0,
            topk=5,
            topk_accuracy=90.0,
            topk_accuracy_row=[85.0, 96.0, 89.0],
        ),
    ]
    s = C.summarize(C.RunRows(tasks=tasks))
    assert s["A_last"] == 50.0 and s["A_avg"] == pytest.approx(70.0)
    assert s["F_last"] == pytest.approx(((90.0 - 40.0) + (80.0 - 70.0)) / 2)  # best before the last, per task
    assert s["F_max"] == pytest.approx(50.0)  # the worst drop, not the mildest
    assert s["A_last_best_epoch"] == 55.0
    assert s["A_last_topk"] == 90.0 and s["A_avg_topk"] == pytest.approx((99.0 + 95.0 + 90.0) / 3)
    assert s["F_last_topk"] == pytest.approx(((99.0 - 85.0) + (97.0 - 96.0)) / 2)
    assert "A_auc" not in s and "I_last" not in s  # another protocol's; a cross-run rule
    rows = C.RunRows(tasks=tasks)
    assert rows.topk == 5 and C.RunRows(tasks=tasks[:1]).topk == 5 and C.RunRows().topk is None
    mixed = [tasks[0], R.TaskOutcome(1, 70.0, [60.0, 80.0, None], topk=3, topk_accuracy=95.0)]
    assert C.RunRows(tasks=mixed).topk is None
    assert (
        C.RunRows(tasks=[tasks[0], R.TaskOutcome(1, 70.0, [60.0, 80.0, None], topk=5)]).topk is None
    )  # one not measured
    partial = [tasks[0], R.TaskOutcome(1, 70.0, [60.0, 80.0, None], best_epoch_accuracy=None)]
    s = C.summarize(C.RunRows(tasks=partial))
    assert s["A_last_topk"] is None and s["A_last_best_epoch"] is None
    assert C.summarize(C.RunRows(tasks=[R.TaskOutcome(0, 90.0, [90.0])]))["F_max"] is None
    # the worst drop skips a task not evaluated at the end
    gap = [
        R.TaskOutcome(0, 90.0, [90.0, None]),
        R.TaskOutcome(1, 70.0, [None, 80.0]),
        R.TaskOutcome(2, 60.0, [None, 70.0, 50.0]),
    ]
    assert C.summarize(C.RunRows(tasks=gap))["F_max"] == pytest.approx(10.0)
    # task-free: class-wise F_last, the loop's figures as given, the count of points an int
    free = C.RunRows(
        config={"stream": "iblurry"},
        tasks=[
            R.TaskOutcome(0, 90.0, class_accuracy=None),
            R.TaskOutcome(1, 80.0, class_accuracy=[80.0, None]),
            R.TaskOutcome(2, 60.0, class_accuracy=[None, 30.0]),
        ],
        anytime=[R.AnytimePoint(0, 5, 40.0, 1), R.AnytimePoint(0, 10, 50.0, 2)],
        online={"train_seconds": 3, "samples_seen": None},
    )
    s = C.summarize(free)
    assert s["F_last"] == pytest.approx(80.0)  # class 0: 80 -> not evaluated (0)
    assert s["train_seconds"] == 3.0 and isinstance(s["train_seconds"], float) and s["samples_seen"] is None
    assert s["anytime_evals"] == 2 and type(s["anytime_evals"]) is int
    assert s["A_auc"] == pytest.approx(45.0)


def test_metric_rows_text_letter_direction_and_seed_statistics() -> None:
    a_last, f_last = C.BUILTINS["A_last"], C.BUILTINS["F_last"]
    assert a_last.letter == "A" and not a_last.lower_is_better and f_last.lower_is_better
    assert a_last.text(86.0) == "86.00" and a_last.text(None) == "—" and a_last.text(float("nan")) == "—"
    assert a_last.text(3.14159, 1) == "3.1"
    assert a_last.applies_to("task") and not C.BUILTINS["A_auc"].applies_to("task")
    nan = C.Metric("x", "x", "x", compute=lambda rows: float("nan"))
    assert nan.value(C.RunRows()) is None
    assert C.Metric("x", "x", "x", compute=lambda rows: True).value(C.RunRows()) == 1.0
    assert C.Metric("x", "x", "x", compute=lambda rows: 3).value(C.RunRows()) == 3
    assert C.Metric("x", "x", "x").value(C.RunRows()) is None
    assert C.mean_std([]) == (None, None) and C.mean_std([4.0]) == (4.0, None)
    mean, std = C.mean_std([1.0, 2.0, 6.0])
    assert mean == pytest.approx(3.0) and std == pytest.approx(((4.0 + 1.0 + 9.0) / 2) ** 0.5)


def test_summarize_keeps_going_past_a_failing_plugin_metric() -> None:
    def broken(rows: C.RunRows) -> float:
        raise ValueError("x" * 400)

    metrics = (
        C.Metric("broken", "b", "b", compute=broken),
        C.BUILTINS["I_last"],
        C.Metric("task_only", "t", "t", compute=lambda rows: 1.0, protocols=("task",)),
        C.Metric("later", "l", "l", compute=lambda rows: 2.5),
    )
    s = C.summarize(C.RunRows(config={"stream": "iblurry"}), metrics)
    assert s == {"broken": None, "later": 2.5}
    line = next(f for f in C.failures() if "'broken'" in f)
    assert len(line) == 300 and line.startswith("metric 'broken' failed on a run's rows: ValueError: xxx")


def test_a_task_checkpoint_records_the_validation_split_it_was_trained_without(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resume with another validation split is refused by this hash: every task checkpoint of a
    run with `val_fraction` carries the hash of its held-out samples (none without one)."""
    from rmconsole.cl import streams

    first_label_predictor(monkeypatch)
    data = skewed_data()
    cfg = config(method="er", eval_period=10, n_tasks=5, val_fraction=0.2)
    rec = Recorder()
    online.run_online(cfg, data, torch.device("cpu"), rec)
    held = online.build_online_protocol(cfg, data).held_out
    assert held is not None and rec.checkpoints
    assert all(c["val_hash"] == streams.stream_hash(held.validation) for c in rec.checkpoints)
    rec = Recorder()
    online.run_online(config(method="er", eval_period=10, n_tasks=5), data, torch.device("cpu"), rec)
    assert all("val_hash" not in c for c in rec.checkpoints)


def test_a_diverged_model_stops_at_the_first_anytime_evaluation() -> None:
    """At lr=1e30 the first steps overflow: the driver stops at the first anytime evaluation after
    them (not later, at a task end, after scoring chance for the rest of the task)."""
    from rmconsole.cl.train import Diverged

    cfg = config(method="er", eval_period=7, n_tasks=5, lr=1e30)
    with pytest.raises(Diverged, match=r"^er diverged in task 1 \(at streamed sample (7|14|21)\)"):
        online.run_online(cfg, skewed_data(train_per_class=40), torch.device("cpu"), Recorder())


def test_a_task_ends_accuracy_row_is_per_task_group_and_absent_without_test_evaluation() -> None:
    """The accuracy row after each task has one entry per task's major classes (A_last's matrix);
    with evaluate_test=false the protocol holds no test label and the row is absent, not made up."""
    data = skewed_data(train_per_class=20)
    cfg = config(method="er", eval_period=50, n_tasks=5)
    rec = Recorder()
    online.run_online(cfg, data, torch.device("cpu"), rec)
    assert [len(o.accuracy_row) for o in rec.outcomes] == [5] * 5
    assert all(o.accuracy is not None for o in rec.outcomes)
    blind = config(method="er", eval_period=50, n_tasks=5, evaluate_test=False, val_fraction=0.2)
    proto = online.build_online_protocol(blind, data)
    assert proto.test_labels.dtype == torch.long and proto.test_labels.numel() == 0
    rec = Recorder()
    online.run_online(blind, data, torch.device("cpu"), rec)
    assert len(rec.outcomes) == 5 and all(o.accuracy_row is None and o.accuracy is None for o in rec.outcomes)
