"""What iCaRL and BiC call a task's "new" and "old" classes, in disjoint and blurry streams.

Both methods were defined for disjoint class-incremental learning: a task brings classes never
seen before (new), everything learned earlier is old; new classes get labels, old classes get
distillation from the previous model, and BiC corrects the new classes' logits. In a blurry
stream every class already appears in task 0, so the literal rule ("never seen before") makes
every class old from task 1 on: nothing is learned from labels any more (the RM authors' code
does exactly this, see docs/baselines.md). rmconsole offers both readings through `new_classes`:

- ``task`` (default): a task's new classes are its own (major) classes, plus any class never
  seen before. Identical to the literal rule on disjoint streams.
- ``unseen``: only classes never seen before (the papers' literal rule, the authors' code).
"""

from __future__ import annotations

import copy
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor, nn

from ..learner import Setup
from ..models import Backbone
from .icarl_params import NEW_CLASS_RULES, ICaRLParams


def split_new_old(seen_before: Tensor, seen_now: Tensor, major: list[int], rule: str) -> tuple[Tensor, Tensor]:
    """(new, old) boolean class masks for a task.

    `seen_before`: classes exposed by earlier tasks; `seen_now`: after this task's stream is
    exposed; `major`: the task's own classes. Old classes are seen before and not new.
    """
    if rule not in NEW_CLASS_RULES:
        raise ValueError(f"unknown new-class rule {rule!r}; allowed: {', '.join(NEW_CLASS_RULES)}")
    new = seen_now & ~seen_before
    if rule == "task":
        majors = torch.zeros_like(seen_now)
        majors[torch.tensor(major, dtype=torch.long, device=seen_now.device)] = True
        new = new | (majors & seen_now)
    old = seen_before & ~new
    return new, old


def frozen_copy(model: nn.Module) -> nn.Module:
    """The model as it is now, in eval mode and without gradients: the distillation teacher."""
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


NP = TypeVar("NP", bound=ICaRLParams)


class NewOldClasses(Generic[NP]):
    """Mixin of iCaRL and BiC: at each task start, `new_classes` / `old_classes` by the run's
    `new_classes` rule and `previous_model`, a frozen copy of the model when there are old classes."""

    previous_model: nn.Module | None = None
    params: NP  # iCaRL's params, or BiC's (which extend them)
    seen: Tensor  # the Method's (this mixin comes first in iCaRL's and BiC's bases)
    setup: Setup
    model: Backbone

    def before_task(self, task: Any) -> None:
        seen_before = self.seen.clone()
        super().before_task(task)  # type: ignore[misc]  # the Method after this mixin in the MRO has it
        self.new_classes, self.old_classes = split_new_old(
            seen_before, self.seen, self.setup.groups[task.index], self.params.new_classes
        )
        self.previous_model = frozen_copy(self.model) if bool(self.old_classes.any()) else None
