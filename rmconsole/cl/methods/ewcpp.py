"""EWC++ (Chaudhry et al., ECCV 2018) as the follow-up runs it on task-free streams
(PROTOCOL §9.5; its ewc.py).

What differs from ER (everything else is the follow-up's ER: batches, reservoir memory):
- an online Fisher: after every optimiser step, F <- (1 - alpha) F + alpha g^2 from the step's
  gradient g (the first step of a parameter sets F = g^2), alpha = `ewcpp_alpha` (0.5);
- at each task boundary (the protocol gives EWC++ one), theta* and F are snapshotted into the
  one penalty slot (the newest replaces the previous: EWC++'s online regulariser);
- from then on the loss gets `ewcpp_weight` x sum F* (theta - theta*)^2 (100; the follow-up's
  form, without 1/2), over every parameter but the classifier head, so task 0 has no penalty.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, cast

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .base import Method, Task, mixed_cross_entropy
from .ewcpp_params import EWCppParams
from .taskfree import TaskFree


class EWCpp(TaskFree, Method[EWCppParams]):
    name = "ewcpp"
    default_memory_policy = "reservoir"
    # captured as a CUDA graph (graphs.MethodStep): CutMix drawn on the host before the step
    # (`step_key`), the Fisher update in `after_step` decided on the device, the snapshot (theta*,
    # F*) kept in tensors updated in place; whether there is one yet and whether every Fisher
    # had its first update are the graph's key
    capturable_step = True
    kept_state: tuple[str, ...] = ("fisher", "anchor", "importance")  # (memory bytes)

    def online_start(self) -> None:
        super().online_start()
        self.penalised = [p for n, p in self.model.named_parameters() if not n.startswith("fc.")]
        self.fisher = [torch.zeros_like(p) for p in self.penalised]
        # per parameter, on the device: whether a finite gradient came yet (the first sets F = g^2)
        self.started = [torch.zeros((), dtype=torch.bool, device=self.device) for _ in self.penalised]
        self.updated: set[int] = set()  # host mirror: the parameters whose Fisher had its first update
        self.anchor: list[Tensor] | None = None  # theta* at the last task boundary
        self.importance: list[Tensor] | None = None  # F at the last task boundary

    def penalty(self) -> Tensor:
        """weight x sum F* (theta - theta*)^2 over the penalised parameters (0 before a boundary)."""
        if self.anchor is None or self.importance is None:
            return torch.zeros((), device=self.device)
        total = cast(
            Tensor, sum((f * (p - a).pow(2)).sum() for p, a, f in zip(self.penalised, self.anchor, self.importance))
        )
        return self.params.ewcpp_weight * total

    def step_key(self, x: Tensor, y: Tensor) -> tuple[bool, int]:
        self.draw_step_mix(x)  # the default loss's CutMix, drawn here (the host side)
        return self.anchor is not None, len(self.updated)

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        mixed = self.step_cutmix(x, y)
        if mixed is None:
            loss = nnf.cross_entropy(self.mask_unseen(self.model(x)), y)
        else:
            x, y_a, y_b, w_a, w_b = mixed
            loss = mixed_cross_entropy(self.mask_unseen(self.model(x)), y_a, y_b, w_a, w_b)
        return loss + self.penalty() if self.anchor is not None else loss

    @cached_property
    def blend(self) -> Tensor:
        """A later update's (keep, scale) of F and g^2, indexed [finite, started], made once on the
        device: an update selects its pair with one indexing instead of wrapping Python scalars
        per call."""
        alpha = self.params.ewcpp_alpha
        return torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0 / alpha], [1.0 - alpha, 1.0]]], device=self.device)

    @torch.no_grad()
    def after_step(self) -> None:
        """F <- (1 - alpha) F + alpha g^2 (a parameter's first finite gradient: F = g^2); a
        gradient with a non-finite element is skipped. Decided on the device: no host sync.

        The parameter's first update (host-known: `updated`) selects with torch.where; later ones
        blend in place with 0-dim coefficients (keep F: 1 - alpha, or 0 while no finite gradient
        came yet, or 1 to skip; `blend`, one indexing), on a CPU half the cost of the sync it replaced: a float32
        `isfinite(g).all()` is four passes and three allocations over g; `(g * 0).sum()` is NaN
        exactly when g has an inf or NaN, in two. Bit-identical to the host-decided rule, except
        after a first gradient that was not finite, where F = g^2 is computed as
        alpha * (g^2 / alpha) (exact for alpha a power of 2, such as the default 0.5)."""
        alpha = self.params.ewcpp_alpha
        for i, (p, f, started) in enumerate(zip(self.penalised, self.fisher, self.started)):
            if p.grad is None:
                continue
            g2 = p.grad.pow(2)
            if i not in self.updated:
                finite = torch.isfinite(p.grad).all()
                update = torch.where(started, f.mul(1 - alpha).add_(g2, alpha=alpha), g2)
                f.copy_(torch.where(finite, update, f))
                self.updated.add(i)
            else:
                finite = p.grad.mul(0).sum().isfinite()
                keep, scale = self.blend[finite.long().view(1), started.long().view(1)][
                    0
                ].unbind()  # no 0-dim index: a read
                # skipped: 0 * inf and 0 * NaN are NaN, set to 0; a finite g^2 = inf stays inf
                g2.mul_(scale).nan_to_num_(nan=0.0, posinf=float("inf"))
                f.mul_(keep).add_(g2, alpha=alpha)
            started.logical_or_(finite)

    def online_task_end(self, task: Task) -> None:
        if self.anchor is None or self.importance is None:
            self.anchor = [p.detach().clone() for p in self.penalised]
            self.importance = [f.clone() for f in self.fisher]
        else:  # in place: a captured step reads these tensors
            for a, p, imp, f in zip(self.anchor, self.penalised, self.importance, self.fisher):
                a.copy_(p.detach())
                imp.copy_(f)
        mean = float(sum(f.sum() for f in self.fisher) / sum(f.numel() for f in self.fisher))
        self.report.log(
            f"task {task.index + 1}: EWC++ snapshot (theta*, F), mean F {mean:.3g}; penalty weight "
            f"{self.params.ewcpp_weight:g}"
        )

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.task_free:
            state["ewcpp"] = {
                "fisher": [f.cpu() for f in self.fisher],
                "started": [bool(s) for s in self.started],
                "anchor": None if self.anchor is None else [a.cpu() for a in self.anchor],
                "importance": None if self.importance is None else [f.cpu() for f in self.importance],
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        saved = state.get("ewcpp")
        if saved is None:
            return
        for f, s in zip(self.fisher, saved["fisher"]):
            f.copy_(s)
        for s, value in zip(self.started, saved["started"]):
            s.fill_(bool(value))
        self.updated = set()  # the next update of each parameter takes the exact first path
        self.anchor = None if saved["anchor"] is None else [a.to(self.device) for a in saved["anchor"]]
        self.importance = None if saved["importance"] is None else [f.to(self.device) for f in saved["importance"]]
