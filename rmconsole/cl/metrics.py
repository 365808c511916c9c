"""Continual-learning metrics from per-class test accuracies (PROTOCOL §7), in percent.

acc[k][j] is the accuracy on the classes of task j after training task k: the mean of the
per-class accuracies of task j's (major) classes, as the authors compute it. In blurry runs
every task is evaluated on the whole test set, so this row is a breakdown of one evaluation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def per_class_accuracy(predictions: Tensor, labels: Tensor, n_classes: int) -> list[float | None]:
    """Percent correct per class; None for a class absent from `labels`."""
    import torch

    total = torch.bincount(labels, minlength=n_classes)
    correct = torch.bincount(labels[predictions == labels], minlength=n_classes)
    return [100.0 * c / t if t else None for c, t in zip(correct.tolist(), total.tolist())]


def topk_hits(ranked: Tensor, labels: Tensor) -> Tensor:
    """Per sample: is the label among the ranked classes ((N, k) class indices, best first)?"""
    return (ranked == labels.view(-1, 1)).any(1)


def hit_rate(hits: Tensor) -> float:
    """Percent of True in a boolean tensor (the top-k accuracy from `topk_hits`)."""
    return 100.0 * hits.float().mean().item() if len(hits) else float("nan")


def per_class_hit_rate(hits: Tensor, labels: Tensor, n_classes: int) -> list[float | None]:
    """Percent of hits per class; None for a class absent from `labels` (top-k per class)."""
    import torch

    total = torch.bincount(labels, minlength=n_classes)
    hit = torch.bincount(labels[hits], minlength=n_classes)
    return [100.0 * h / t if t else None for h, t in zip(hit.tolist(), total.tolist())]


def accuracy(predictions: Tensor, labels: Tensor) -> float:
    return 100.0 * (predictions == labels).float().mean().item() if len(labels) else float("nan")


def task_accuracy_row(class_acc: list[float | None], groups: list[list[int]]) -> list[float | None]:
    """acc[k][:] from the per-class accuracies after task k: one value per task's classes."""
    row = []
    for classes in groups:
        vals = [v for c in classes if (v := class_acc[c]) is not None]
        row.append(sum(vals) / len(vals) if vals else None)
    return row


def forgetting(matrix: list[list[float | None]]) -> float | None:
    """F_last: mean over tasks j < T-1 of (best acc[k][j] for k < T-1) - acc[T-1][j]."""
    if len(matrix) < 2:
        return None
    last = len(matrix) - 1
    drops = []
    for j in range(last):
        before = [v for k in range(last) if (v := matrix[k][j]) is not None]
        if before and (end := matrix[last][j]) is not None:
            drops.append(max(before) - end)
    return sum(drops) / len(drops) if drops else None


def summarize(task_accuracies: list[float], matrix: list[list[float | None]]) -> dict[str, float | None]:
    """A_last, A_avg and F_last from the accuracy after each task and the accuracy matrix."""
    if not task_accuracies:
        return {"A_last": None, "A_avg": None, "F_last": None}
    return {
        "A_last": task_accuracies[-1],
        "A_avg": sum(task_accuracies) / len(task_accuracies),
        "F_last": forgetting(matrix),
    }


def intransigence(joint_accuracy: float | None, a_last: float | None) -> float | None:
    """I_last: the joint upper bound's accuracy minus this run's last accuracy."""
    if joint_accuracy is None or a_last is None or math.isnan(a_last):
        return None
    return joint_accuracy - a_last
