import math

import pytest
import torch

from rmconsole.cl import metrics
from rmconsole.cl.schedule import epoch_lr


def test_forgetting_and_summary() -> None:
    matrix = [[90.0, 10.0, 0.0], [80.0, 85.0, 5.0], [70.0, 80.0, 95.0]]
    # task 0: best 90 before the last, now 70 -> 20; task 1: best 85 -> 80 -> 5
    assert metrics.forgetting(matrix) == pytest.approx(12.5)
    summary = metrics.summarize([40.0, 60.0, 80.0], matrix)
    assert summary == {"A_last": 80.0, "A_avg": 60.0, "F_last": pytest.approx(12.5)}
    assert metrics.intransigence(95.0, 80.0) == 15.0 and metrics.intransigence(None, 80.0) is None


def test_per_class_accuracy_and_rows() -> None:
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    preds = torch.tensor([0, 1, 1, 1, 0, 0])
    acc = metrics.per_class_accuracy(preds, labels, 4)
    assert acc == [50.0, 100.0, 0.0, None]
    assert metrics.task_accuracy_row(acc, [[0, 1], [2, 3]]) == [75.0, 0.0]
    assert metrics.accuracy(preds, labels) == pytest.approx(50.0)


def test_cosine_schedule_matches_torch_warm_restarts() -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=1, T_mult=2, eta_min=0.0005)
    assert epoch_lr(0, 0.05) == pytest.approx(0.005)  # warm-up epoch
    for epoch in range(1, 64):
        if epoch >= 2:
            sched.step()
        assert epoch_lr(epoch, 0.05) == pytest.approx(opt.param_groups[0]["lr"]), epoch


def test_step_schedule() -> None:
    assert epoch_lr(1, 0.1, "step") == pytest.approx(0.1)
    assert epoch_lr(31, 0.1, "step") == pytest.approx(0.01)
    assert epoch_lr(95, 0.1, "step") == pytest.approx(0.1 * 1e-4)
    assert math.isclose(epoch_lr(5, 0.1, "constant"), 0.1)
