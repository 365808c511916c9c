"""EWC++ (Chaudhry et al., ECCV 2018) as the follow-up runs it on task-free streams
(PROTOCOL §9.5; its ewc.py).

What differs from ER (everything else is the follow-up's ER: batches, reservoir memory):
- an online Fisher: after every optimiser step, F <- (1 - alpha) F + alpha g^2 from the step's
  gradient g (the first step of a parameter sets F = g^2), alpha = `ewcpp_alpha` (0.5);
- at each task boundary (the protocol gives EWC++ one), theta* and F are snapshotted into the
  one penalty slot (the newest replaces the previous: EWC++'s online regulariser);
- from then on the loss gets `ewcpp_weight` x sum F* (theta - theta*)^2 (100; the follow-up's
  form, without 1/2), over every parameter but the classifier head, so task 0 has no penalty.

How (the cost is per parameter tensor, and a ResNet34 has 108 of them): the penalty's gradient,
2 x weight x F* (theta - theta*), is added to the gradients after backward (`after_backward`),
by a few multi-tensor operations, instead of through autograd's per-tensor nodes; the Fisher is
one flat buffer (`fisher` are its views), on a GPU blended by whole-buffer operations. Both give
the floats the per-tensor forms gave (tests/cl/test_method_update_rules.py). The step's loss is
therefore the cross-entropy alone; the penalty's value is `penalty()`.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, cast

import torch
import torch.nn.functional as nnf
from torch import Tensor

from ..step_audit import auditing
from .base import Method, Task, mixed_cross_entropy
from .ewcpp_params import EWCppParams
from .taskfree import TaskFree


def memory_order(t: Tensor) -> list[int]:
    """The dimensions of `t` from its largest stride to its smallest: `t.permute(order)` walks
    its memory in order (a channels_last weight: 0, 2, 3, 1)."""
    strides = t.stride()
    return sorted(range(t.dim()), key=lambda d: -strides[d])


class EWCpp(TaskFree, Method[EWCppParams]):
    name = "ewcpp"
    default_memory_policy = "reservoir"
    # captured as a CUDA graph (graphs.MethodStep): CutMix drawn on the host before the step
    # (`step_key`), the penalty's gradient (`after_backward`) and the Fisher update (`after_step`)
    # decided on the device, the snapshot (theta*, F*) kept in tensors updated in place; whether
    # there is one yet and whether every Fisher had its first update are the graph's key
    capturable_step = True
    kept_state: tuple[str, ...] = ("fisher_flat", "anchor", "importance", "weighted", "pull")  # (memory bytes)

    def online_start(self) -> None:
        super().online_start()
        self._track([p for n, p in self.model.named_parameters() if not n.startswith("fc.")])

    def _track(self, penalised: list[Tensor]) -> None:
        """The Fisher's and the penalty's state for these parameters, before any update."""
        self.penalised = penalised
        self.__dict__.pop("segment", None)  # (made for the parameters tracked before, if any)
        self.orders = [memory_order(p) for p in penalised]
        sizes = [p.numel() for p in penalised]
        self.fisher_flat = torch.zeros(sum(sizes), device=self.device)
        # F of each parameter: a view of the flat buffer laid out as the parameter is (its
        # memory order), so the flat buffer and the gradients flattened in that order align
        self.fisher = [
            flat.view([p.shape[d] for d in order]).permute([order.index(d) for d in range(p.dim())])
            for flat, p, order in zip(self.fisher_flat.split(sizes), penalised, self.orders)
        ]
        # per parameter, on the device: whether a finite gradient came yet (the first sets F = g^2)
        self.started = torch.zeros(len(penalised), dtype=torch.bool, device=self.device)
        self.updated: set[int] = set()  # host mirror: the parameters whose Fisher had its first update
        self.anchor: list[Tensor] | None = None  # theta* at the last task boundary
        self.importance: list[Tensor] | None = None  # F at the last task boundary
        self.weighted: list[Tensor] | None = None  # weight x F*, made with the snapshot (`_weigh`)
        self.pull: list[Tensor] | None = None  # the penalty's gradient, written in place each update

    def penalty(self) -> Tensor:
        """weight x sum F* (theta - theta*)^2 over the penalised parameters (0 before a boundary):
        the value whose gradient `after_backward` adds."""
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
        """The cross-entropy (with CutMix); the penalty joins by its gradient (`after_backward`)."""
        mixed = self.step_cutmix(x, y)
        if mixed is None:
            return nnf.cross_entropy(self.mask_unseen(self.model(x)), y)
        x, y_a, y_b, w_a, w_b = mixed
        return mixed_cross_entropy(self.mask_unseen(self.model(x)), y_a, y_b, w_a, w_b)

    @torch.no_grad()
    def after_backward(self) -> None:
        """The penalty's gradient, (weight x F*) x 2 (theta - theta*), added to each penalised
        parameter's: autograd's own product for `penalty()` (its pow's backward doubles the
        difference, its sum's spreads the weight over F*), in five multi-tensor operations on
        buffers of the snapshot's (no allocation: on a CPU fresh parameter-sized tensors cost
        more than the arithmetic). A parameter the loss left without a gradient gets the
        penalty's alone."""
        if self.anchor is None or self.weighted is None or self.pull is None:
            return
        pull = self.pull
        torch._foreach_copy_(pull, self.penalised)
        torch._foreach_sub_(pull, self.anchor)
        torch._foreach_mul_(pull, 2.0)
        torch._foreach_mul_(pull, self.weighted)
        grads, added = [], []
        for p, g in zip(self.penalised, pull):
            if p.grad is None:
                p.grad = g.clone()
            else:
                grads.append(p.grad)
                added.append(g)
        if grads:
            torch._foreach_add_(grads, added)

    def _weigh(self) -> None:
        """weight x F* for the penalty's gradient, after a snapshot: in place once made (a
        captured step reads it), with the buffer its gradient is written into."""
        assert self.anchor is not None and self.importance is not None
        weighted = list(torch._foreach_mul(self.importance, self.params.ewcpp_weight))
        if self.weighted is None or self.pull is None:
            self.weighted, self.pull = weighted, [torch.empty_like(a) for a in self.anchor]
        else:
            torch._foreach_copy_(self.weighted, weighted)

    @cached_property
    def segment(self) -> Tensor:
        """Each element of the flat Fisher's parameter index (int32): a per-parameter choice spread
        over the buffer by one gather (`_blend_all`). Made by the flat form's first update, an
        eager step (a captured step's first step of a key is its warm-up), as `blend` is: a CPU
        run, which keeps the per-tensor loop, never holds it."""
        sizes = torch.tensor([p.numel() for p in self.penalised])
        index = torch.arange(len(self.penalised), dtype=torch.int32).repeat_interleave(sizes)
        return index.to(self.device)

    @cached_property
    def scratch(self) -> Tensor:
        """The CPU loop's working buffer, as large as the largest penalised parameter: its g x 0
        and g^2 are written here. A CPU pays page faults for each fresh parameter-sized tensor,
        which cost more than the arithmetic (two an update took a third of EWC++'s update at the
        MNIST preset). A working buffer, not state: no checkpoint or `kept_state` holds it."""
        return torch.empty(max(p.numel() for p in self.penalised), device=self.device)

    @cached_property
    def blend(self) -> Tensor:
        """A later update's (keep, scale) of F and g^2, indexed [finite, started], made once on the
        device: an update selects its pairs with one indexing instead of wrapping Python scalars
        per call."""
        alpha = self.params.ewcpp_alpha
        return torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0 / alpha], [1.0 - alpha, 1.0]]], device=self.device)

    @torch.no_grad()
    def after_step(self) -> None:
        """F <- (1 - alpha) F + alpha g^2 (a parameter's first finite gradient: F = g^2); a
        gradient with a non-finite element is skipped. Decided on the device: no host sync.

        A parameter's first update (host-known: `updated`) selects with torch.where, one tensor
        at a time. A later one is blended in place, one tensor at a time on a CPU (each of its
        passes over memory costs there, and a gather over the flat buffer would add three), or,
        on a GPU once every parameter has a gradient, by the same arithmetic over the flat buffer
        (`_blend_all`: about 15 kernels where the loop launches about 13 a parameter). A CPU
        counting a GPU's operators (an active StepAudit) takes the GPU's form."""
        grads = [p.grad for p in self.penalised]
        later = len(self.updated) == len(grads) and all(g is not None for g in grads)
        if later and (self.device.type != "cpu" or auditing()):
            self._blend_all(cast(list[Tensor], grads))
            return
        alpha = self.params.ewcpp_alpha
        for i, (g, f) in enumerate(zip(grads, self.fisher)):
            if g is None:
                continue
            started = self.started[i]  # a view: updated in place below
            if i not in self.updated:
                g2 = g.pow(2)
                finite = torch.isfinite(g).all()
                update = torch.where(started, f.mul(1 - alpha).add_(g2, alpha=alpha), g2)
                f.copy_(torch.where(finite, update, f))
                self.updated.add(i)
            else:  # `_blend_all`'s arithmetic for one tensor, in a scratch buffer (no allocation)
                g2 = self.scratch[: g.numel()].view(g.shape) if g.dtype == self.scratch.dtype else torch.empty_like(g)
                finite = torch.mul(g, 0, out=g2).sum().isfinite()
                torch.pow(g, 2, out=g2)
                # no 0-dim index (a read on the host): one-element ones
                keep, scale = self.blend[finite.long().view(1), started.long().view(1)][0].unbind()
                g2.mul_(scale).nan_to_num_(nan=0.0, posinf=float("inf"))
                f.mul_(keep).add_(g2, alpha=alpha)
            started.logical_or_(finite)

    def _blend_all(self, grads: list[Tensor]) -> None:
        """A later update of every Fisher at once: F <- keep F + alpha (scale g^2), keep and scale
        per parameter from `blend` (1 - alpha and 1 after a finite gradient; 1 and 0, F kept, after
        one with an inf or NaN: 0 x inf and 0 x NaN are NaN, set to 0; a finite g^2 = inf stays inf).
        A gradient is finite when the 1-norm of g x 0 is (0, or NaN), per tensor in one operation."""
        finite = torch.stack(torch._foreach_norm(torch._foreach_mul(grads, 0.0), 1)).isfinite()
        choice = self.blend[finite.long(), self.started.long()].index_select(0, self.segment)
        g2 = torch.cat([g.permute(order).reshape(-1) for g, order in zip(grads, self.orders)])
        g2.mul_(g2).mul_(choice[:, 1]).nan_to_num_(nan=0.0, posinf=float("inf"))
        self.fisher_flat.mul_(choice[:, 0]).add_(g2, alpha=self.params.ewcpp_alpha)
        self.started.logical_or_(finite)

    def online_task_end(self, task: Task) -> None:
        if self.anchor is None or self.importance is None:
            self.anchor = [p.detach().clone() for p in self.penalised]
            self.importance = [torch.empty_like(p).copy_(f) for p, f in zip(self.penalised, self.fisher)]
        else:  # in place: a captured step reads these tensors
            for a, p, imp, f in zip(self.anchor, self.penalised, self.importance, self.fisher):
                a.copy_(p.detach())
                imp.copy_(f)
        self._weigh()
        mean = float(sum(f.sum() for f in self.fisher) / self.fisher_flat.numel())
        self.report.log(
            f"task {task.index + 1}: EWC++ snapshot (theta*, F), mean F {mean:.3g}; penalty weight "
            f"{self.params.ewcpp_weight:g}"
        )

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.task_free:
            state["ewcpp"] = {
                "fisher": [f.cpu() for f in self.fisher],
                "started": self.started.tolist(),
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
        self.started.copy_(torch.tensor(saved["started"], dtype=torch.bool))
        self.updated = set()  # the next update of each parameter takes the exact first path
        self.anchor = None if saved["anchor"] is None else [a.to(self.device) for a in saved["anchor"]]
        self.importance = None if saved["importance"] is None else [f.to(self.device) for f in saved["importance"]]
        self.weighted = self.pull = None
        if self.anchor is not None:
            self._weigh()
