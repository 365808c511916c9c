"""The follow-up's metrics of a task-free run (PROTOCOL §9.3), in percent. Pure.

- A_auc: the unweighted mean of the anytime accuracies (one every `eval_period` streamed
  samples, each on the test samples of the classes exposed so far).
- A_avg / A_last: the mean and the last of the task-end accuracies (on the classes exposed).
- F_last (the follow-up's, class-wise): for each class whose best accuracy over the first T-1
  task ends is above 0, that best minus its accuracy at the last task end; the mean of these
  gaps. (The RM paper's F_last averages per task over acc[k][j]; a task-free run reports the
  follow-up's.)
"""

from __future__ import annotations

from collections.abc import Iterable


def area_under_curve(accuracies: Iterable[float]) -> float | None:
    """A_auc: the mean of the anytime accuracies (None without any)."""
    values = list(accuracies)
    return sum(values) / len(values) if values else None


def class_forgetting(class_accuracy: list[list[float | None]]) -> float | None:
    """F_last as the follow-up computes it, from the per-class accuracies at each task end
    (None for a class not evaluated at that end)."""
    if len(class_accuracy) < 2:
        return None
    last = class_accuracy[-1]
    gaps = []
    for c in range(len(last)):
        before = [v for row in class_accuracy[:-1] if c < len(row) and (v := row[c]) is not None]
        if not before or max(before) <= 0:
            continue
        final = end if (end := last[c]) is not None else 0.0
        gaps.append(max(before) - final)
    return sum(gaps) / len(gaps) if gaps else None
