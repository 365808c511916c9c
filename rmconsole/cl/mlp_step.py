"""The default training step of an MLP backbone without the autograd engine: the same kernels
autograd runs, called in order.

The paper's MNIST model (`mlp400`: Linear-BatchNorm-ReLU blocks and a linear head) trains its
memory epochs in batches of 8: a step is a few dozen kernels of arithmetic but more than two
hundred operator calls through autograd (views, transposes, detaches, gradient accumulation,
the engine's bookkeeping), which on one CPU core is a large share of the step. Here the
forward keeps what the backward needs and the backward calls the kernels autograd's formulas
call, with the same operands in the same order: addmm, the native batch norm (updating the
running statistics) and its backward, threshold_backward for the in-place ReLU, log_softmax
and nll_loss with their backwards (each CutMix term on its own, scaled as autograd scales
it), the masked fill of unseen classes, and each weight gradient as the mm autograd makes.
Every parameter, gradient and batch-norm statistic comes out the same bit for bit
(tests/test_mlp_step.py trains both side by side).

`MLPStep.of(model, optimizer)` returns None for anything else: another architecture, a hook
on a module or parameter (it would not see this step), a parameter the optimiser does not
update, a non-float32 model. The engine uses it only for methods whose step is the default
one (`Learner.plain_step`) on a single-process run without autocast.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn
from torch.nn.modules import module as nn_module

from .models import Backbone

aten = torch.ops.aten
MEAN = 1  # nll_loss reduction


def _hooked(model: nn.Module) -> bool:
    if (
        nn_module._global_forward_hooks
        or nn_module._global_forward_pre_hooks
        or nn_module._global_backward_hooks
        or nn_module._global_backward_pre_hooks
    ):
        return True
    for m in model.modules():
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
            return True
    return any(p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None) for p in model.parameters())


class _Block:
    """One Linear -> BatchNorm1d -> ReLU block's tensors, looked up once (nn.Module's attribute
    lookup costs more than some of the step's kernels). The tensors are the modules' own:
    optimisers and load_state_dict update them in place."""

    __slots__ = (
        "batches",
        "bias",
        "bn_bias",
        "bn_weight",
        "eps",
        "momentum",
        "running_mean",
        "running_var",
        "weight",
        "weight_grad",
        "weight_t",
    )

    def __init__(self, lin: nn.Linear, bn: nn.BatchNorm1d) -> None:
        self.weight, self.bias = lin.weight, lin.bias
        with torch.no_grad():  # a view of the weight: it sees every in-place update of it
            self.weight_t = lin.weight.t()
        self.weight_grad = torch.empty_like(lin.weight)  # each step's mm writes its gradient here (no fresh tensor)
        self.bn_weight, self.bn_bias = bn.weight, bn.bias
        self.running_mean, self.running_var = bn.running_mean, bn.running_var
        # MLPStep.of admits only norms tracking running stats with a fixed momentum: neither is None
        self.batches, self.momentum, self.eps = cast(Tensor, bn.num_batches_tracked), cast(float, bn.momentum), bn.eps


class MLPStep:
    """Forward and backward of Flatten -> [Linear -> BatchNorm1d -> ReLU] x k -> Linear (fc)."""

    def __init__(self, blocks: list[tuple[nn.Linear, nn.BatchNorm1d]], fc: nn.Linear) -> None:
        self.blocks = [_Block(lin, bn) for lin, bn in blocks]
        self.fc_weight, self.fc_bias = fc.weight, fc.bias
        with torch.no_grad():
            self.fc_weight_t = fc.weight.t()
        self.fc_weight_grad = torch.empty_like(fc.weight)
        self.one = torch.ones((), dtype=fc.weight.dtype, device=fc.weight.device)
        self.lowest = torch.finfo(fc.weight.dtype).min
        self._mask: tuple[Tensor, int, Tensor | None] | None = None  # (seen, its version, ~seen or None)

    def unseen_of(self, seen: Tensor | None) -> Tensor | None:
        """~seen, or None when every class is seen (`seen` None: the caller's host mirror knows
        it); recomputed only when `seen` is another tensor or has been written to (its version
        counter moves with every in-place write), never read by the host."""
        if seen is None:
            return None
        cached = self._mask
        if cached is None or cached[0] is not seen or cached[1] != seen._version:
            cached = self._mask = (seen, seen._version, ~seen)
        return cached[2]

    @classmethod
    def of(cls, model: nn.Module, optimizer: torch.optim.Optimizer) -> MLPStep | None:
        if type(model) is not Backbone or type(model.features) is not nn.Sequential or type(model.fc) is not nn.Linear:
            return None
        mods = list(model.features)
        if not mods or type(mods[0]) is not nn.Flatten or (mods[0].start_dim, mods[0].end_dim) != (1, -1):
            return None
        rest = mods[1:]
        if not rest or len(rest) % 3:
            return None
        blocks = []
        for lin, bn, act in zip(rest[::3], rest[1::3], rest[2::3]):
            if (
                type(lin) is not nn.Linear
                or lin.bias is None
                or type(bn) is not nn.BatchNorm1d
                or type(act) is not nn.ReLU
                or not (bn.affine and bn.track_running_stats)
                or bn.momentum is None
                or bn.num_batches_tracked is None
            ):
                return None
            blocks.append((lin, bn))
        if model.fc.bias is None or _hooked(model):
            return None
        params = list(model.parameters())
        updated = {id(p) for group in optimizer.param_groups for p in group["params"]}
        if any(p.dtype != torch.float32 or not p.requires_grad or id(p) not in updated for p in params):
            return None
        return cls(blocks, model.fc)

    @torch.no_grad()
    def __call__(
        self, x: Tensor, y: Tensor, mixed: tuple[Tensor, Tensor, Tensor, float] | None, seen: Tensor | None
    ) -> Tensor:
        """Set `.grad` of every parameter to what `loss.backward()` of the default step gives
        (and update the batch-norm statistics as its forward does). `mixed` is the batch's
        CutMix (`Augmenter.maybe_cutmix`), `seen` the mask of exposed classes (None: all are). Returns the
        step's loss (a 0-d tensor, no host sync)."""
        if mixed is None:
            terms: list[tuple[Tensor, float | None]] = [(y, None)]
        else:
            x, y_a, y_b, lam = mixed
            terms = [(y_a, lam), (y_b, 1 - lam)]
        saved = []
        h = x.flatten(1)
        for b in self.blocks:
            z = torch.addmm(b.bias, h, b.weight_t)
            b.batches.add_(1)
            out, mean, invstd = torch.native_batch_norm(
                z, b.bn_weight, b.bn_bias, b.running_mean, b.running_var, True, b.momentum, b.eps
            )
            saved.append((h, z, mean, invstd, torch.relu_(out)))
            h = saved[-1][-1]
        logits = torch.addmm(self.fc_bias, h, self.fc_weight_t)
        unseen = self.unseen_of(seen)
        if unseen is not None:
            logits = logits.masked_fill(unseen, self.lowest)
        one = self.one
        grad = None
        loss = None
        for target, weight in terms:  # each cross-entropy term as autograd runs it
            log_p = torch._log_softmax(logits, 1, False)
            term, total = aten.nll_loss_forward(log_p, target, None, MEAN, -100)
            term = term if weight is None else term * weight
            loss = term if loss is None else loss + term
            g = aten.nll_loss_backward(one if weight is None else one * weight, log_p, target, None, MEAN, -100, total)
            g = aten._log_softmax_backward_data(g, log_p, 1, logits.dtype)
            grad = g if grad is None else grad + g
        assert grad is not None  # terms holds one or two targets
        if unseen is not None:
            grad = grad.masked_fill(unseen, 0)
        self.fc_weight.grad = torch.mm(grad.t(), h, out=self.fc_weight_grad)
        self.fc_bias.grad = grad.sum(0)
        grad = torch.mm(grad, self.fc_weight)
        for i in range(len(self.blocks) - 1, -1, -1):
            b, (inp, z, mean, invstd, act) = self.blocks[i], saved[i]
            grad = aten.threshold_backward(grad, act, 0)
            grad, b.bn_weight.grad, b.bn_bias.grad = aten.native_batch_norm_backward(
                grad, z, b.bn_weight, b.running_mean, b.running_var, mean, invstd, True, b.eps, [True, True, True]
            )
            b.weight.grad = torch.mm(grad.t(), inp, out=b.weight_grad)
            b.bias.grad = grad.sum(0)
            if i:  # the input needs no gradient
                grad = torch.mm(grad, b.weight)
        assert loss is not None
        return loss
