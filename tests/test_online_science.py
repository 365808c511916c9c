"""Pins of the task-free protocol's science (cl/online.py, cl/metrics_anytime.py, the catalogue's
run summaries) at values where a wrong rule shows: test sets where unseen classes exist,
anytime points that cover different numbers of classes (issue 29; tools/mutation.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from online_helpers import Recorder, config
from rmconsole.cl import metric_catalog as C
from rmconsole.cl import metrics_anytime as MA
from rmconsole.cl import online
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

    return Dataset("digits", split([train_per_class] * 10), split([c + 1 for c in range(10)]),
                   [f"c{i}" for i in range(10)], (0.4,), (0.25,), crop_padding=1)


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
        seen = len(set(seq[:p.samples].tolist()))
        assert p.n_classes == seen
        share = 100.0 * int((test == 0).sum()) / int((test < seen).sum())
        assert p.accuracy == pytest.approx(share)
        partial += seen < 10
    assert partial >= 2  # points taken while unseen classes still existed in the test set
    # the task-end evaluations score the same scope (classes exposed by the stream)
    for outcome in rec.outcomes:
        seen = len(outcome.eval_classes)
        assert outcome.accuracy == pytest.approx(100.0 * int((test == 0).sum()) / int((test < seen).sum()))


def test_a_auc_is_the_unweighted_mean_over_points_with_different_class_counts() -> None:
    """(issue 29 b) A_auc is the mean of the anytime accuracies, each point counting once, however
    many classes it covered (the follow-up's rule), in the catalogue the store asks and in the
    loop's own figure."""
    points = [C.AnytimePoint(10, 90.0, 2), C.AnytimePoint(20, 60.0, 4), C.AnytimePoint(30, 30.0, 10)]
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
    clock = online.Clock(arrivals=50, observed=40, skipped=10, exposed=3, train_seconds=2.0, eval_seconds=0.5,
                         wall_seconds=3.25, evaluations=4, anytime_accuracies=[50.0, 70.0])
    s = online.online_summary(clock, _Counters())
    assert s == {"samples_seen": 50, "samples_trained": 40, "samples_skipped": 10, "train_seconds": 2.0,
                 "eval_seconds": 0.5, "wall_seconds": 3.25, "train_samples_per_s": 20.0, "evaluations": 4,
                 "evaluations_per_s": 8.0, "A_auc": 60.0, "optimiser_steps": 7, "image_passes": 21.0}
    idle = online.online_summary(online.Clock(), _Counters())
    assert idle["train_samples_per_s"] is None and idle["evaluations_per_s"] is None and idle["A_auc"] is None


def test_clock_state_round_trips_and_ignores_unknown_keys() -> None:
    clock = online.Clock(arrivals=5, exposed=2, anytime_accuracies=[1.0])
    state: dict[str, Any] = {**clock.state(), "anytime_sum": 3.0}
    again = online.Clock.from_state(state)
    assert again == clock


def test_class_forgetting_is_the_follow_ups_class_wise_rule() -> None:
    # class 0: best before the end 80 (not the later 60), ends at 50 -> 30; class 1: best 40,
    # ends None (not evaluated) -> counted as 0 -> 40; class 2: never above 0 before -> skipped;
    # class 3: only seen at the end -> skipped
    rows = [[60.0, 40.0, 0.0], [80.0, None, 0.0], [50.0, None, 0.0, 90.0]]
    assert MA.class_forgetting(rows) == pytest.approx((30.0 + 40.0) / 2)
    assert MA.class_forgetting(rows[:1]) is None
    assert MA.class_forgetting([[0.0], [0.0]]) is None
    # a rise counts as negative forgetting (no clamp at 0)
    assert MA.class_forgetting([[20.0], [10.0], [50.0]]) == pytest.approx(-30.0)
