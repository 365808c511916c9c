"""The follow-up's metrics of a task-free run (PROTOCOL §9.3), in percent. Pure.

- A_auc: the unweighted mean of the anytime accuracies (one every `eval_period` streamed
  samples, each on the test samples of the classes exposed so far).
- A_avg / A_last: the mean and the last of the task-end accuracies (on the classes exposed).
- F_last (the follow-up's, class-wise): for each class whose best accuracy over the first T-1
  task ends is above 0, that best minus its accuracy at the last task end; the mean of these
  gaps. (The RM paper's F_last averages per task over acc[k][j]; a task-free run reports the
  follow-up's.)
- at a compute budget (`at_budget`): the curve read where the run's cumulative training FLOPs
  reach the budget, as Prabhu et al. (CVPR 2023) compare methods at equal compute.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


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


@dataclass(frozen=True)
class AtBudget:
    """A task-free run's anytime curve read at a training compute budget (Prabhu et al., CVPR 2023:
    methods compared at the same compute). `accuracy`: at the last evaluation whose cumulative
    training FLOPs are within the budget; `auc`: the mean over the evaluations within it; `over`:
    the run spent more than the budget (its curve is cut there); `samples`: where it was read."""

    accuracy: float | None
    auc: float | None
    samples: int | None
    over: bool


def at_budget(points: Iterable[tuple[int, float, float]], budget_flops: float, spent_flops: float) -> AtBudget:
    """`points`: (samples seen, accuracy, cumulative training FLOPs) of each anytime evaluation,
    in stream order; `spent_flops`: what the whole run spent. None values when no evaluation
    lies within the budget."""
    within = [(s, a) for s, a, f in points if f <= budget_flops]
    over = spent_flops > budget_flops
    if not within:
        return AtBudget(None, None, None, over)
    return AtBudget(within[-1][1], area_under_curve(a for _, a in within), within[-1][0], over)
