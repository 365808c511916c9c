"""LwF's own hyper-parameters and its declaration, free of torch.

rmconsole reads this module (through the `rmconsole.methods` entry point in pyproject.toml) to
list the method, validate `--set lwf_lambda=...` and show the keys in `config-keys` and the
TUI's launch form; the hooks in `method.py` load only when a run trains with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rmconsole.cl.methods.spec import MethodSpec
from rmconsole.cl.settings import MethodParams, param


@dataclass(frozen=True)
class LwFParams(MethodParams):
    """The paper's loss weight and temperature, and the length of its warm-up stage."""

    lwf_lambda: float = param(
        1.0, "LwF: weight lambda_o of the distillation loss on the old classes' outputs (the paper's 1)", ge=0
    )
    lwf_temperature: float = param(
        2.0, "LwF: temperature T of the softened old/new outputs in the distillation loss (the paper's 2)", gt=0
    )
    lwf_new_classes: Literal["task", "unseen"] = param(
        "task",
        "LwF: a task's new classes (labels, warm-up; the rest of the seen classes are distilled): its own "
        "classes and never-seen ones (task, iCaRL's and BiC's rule) or only never-seen ones (unseen: on a "
        "blurry stream nothing is new after task 0)",
    )
    lwf_warmup_epochs: int = param(
        0,
        "LwF: epochs of the warm-up stage before each task after the first: only the new classes' "
        "outputs train, the rest of the network frozen (the paper's optional warm-up; 0 = none)",
        ge=0,
    )


METHOD = MethodSpec(
    "lwf",
    "rmconsole_lwf.method:LwF",
    LwFParams,
    ("task",),
    "LwF (Li & Hoiem 2016): distillation from the model before the task on the old classes' outputs, no exemplars",
)
