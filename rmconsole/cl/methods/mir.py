"""MIR: maximally interfered retrieval (Aljundi et al., NeurIPS 2019), as the follow-up runs it
(PROTOCOL §9.5; its mir.py).

What differs from ER: the memory half of a batch is not drawn at random. Each iteration

1. takes the gradient g of the loss on the (augmented) stream batch,
2. makes a virtual SGD step theta' = theta - lr g (lr: the step's learning rate),
3. scores min(`mir_candidates`, |memory|) random memory samples (clean images) by how much
   their loss would rise, CE(theta') - CE(theta), and
4. trains on the stream batch plus the batch/2 candidates with the largest rise.

Batch norm in steps 1 and 3 is `mir_score_mode`'s (mir_params.py):
- "eval" (default; MIR's paper and code): the look-ahead runs on copies of the running
  statistics and the candidates are scored in eval mode, so neither moves the model's
  statistics and a candidate's score does not depend on the others drawn with it;
- "train" (the follow-up's code, whose mir.py never leaves train mode): the look-ahead's stream
  forward updates the running statistics, and both scoring forwards use the candidates' batch
  statistics, the one at theta updating the running statistics again (the one at theta' runs on
  a copy, as theirs runs on a deep copy of the model). Each step then moves the statistics
  three times instead of once.

The memory is the reservoir. Cost: one extra forward/backward on the stream batch and two
forwards of the candidates per iteration. Steps 1-4's device work (`scores_order`) is a CUDA graph
of its own where the training step is graphed (graphs.CapturedCall), once the memory holds
`mir_candidates` samples (the same shapes every update); the draws and augmentations stay outside.
"""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torch import Tensor
from torch.func import functional_call

from ..compute import ledger_of
from ..graphs import CapturedCall, made_for, set_lr
from ..step_audit import auditing, graphable
from .base import Method
from .mir_params import MIRParams
from .taskfree import TaskFree


def copies(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """Clones of `tensors` (a model's buffers), made by one multi-tensor copy per dtype instead
    of a copy kernel each (a ResNet34's batch norms hold 108)."""
    out = {n: torch.empty_like(t) for n, t in tensors.items()}
    groups: dict[torch.dtype, tuple[list[Tensor], list[Tensor]]] = {}
    for n, t in tensors.items():
        dst, src = groups.setdefault(t.dtype, ([], []))
        dst.append(out[n])
        src.append(t)
    for dst, src in groups.values():
        torch._foreach_copy_(dst, src)
    return out


def stepped_away(params: list[Tensor], grads: list[Tensor], lr: Tensor | float) -> list[Tensor]:
    """theta - lr x g for every parameter, rounded as `p - lr * g` is (the product, then the
    difference), in two multi-tensor operations (not two kernels a parameter). On a CPU it is
    written over the gradients, as ((-lr) x g) + theta, the same float: a CPU pays page faults
    for every new parameter-sized tensor (MIR's update at the MNIST preset 73.6 -> 55.0 ms; the
    allocating form had made it 10% slower than the per-tensor one before it). Only where no
    gradient shares memory with another
    (`own_memory`); a GPU, and a CPU under an audit (which counts the GPU's path), allocate."""
    with torch.no_grad():
        if params[0].device.type == "cpu" and not auditing() and own_memory(grads):
            torch._foreach_mul_(grads, -lr)  # (-lr) x g: -(lr x g) exactly, a NaN's sign kept as the product keeps it
            torch._foreach_add_(grads, params)
            return grads
        return list(torch._foreach_sub(params, torch._foreach_mul(grads, lr)))


def own_memory(tensors: list[Tensor]) -> bool:
    """Whether each tensor is the whole of a storage of its own (a transposed view of a fresh
    product is): no two on one storage, none a part of a larger one or expanded over a smaller
    one. autograd's gradients are, unless a node handed one tensor to two parameters (an
    addition of two weights) or an expanded one to a parameter (the gradient of a sum)."""
    storages = {t.untyped_storage().data_ptr() for t in tensors}
    return len(storages) == len(tensors) and all(
        t.untyped_storage().nbytes() == t.numel() * t.element_size() for t in tensors
    )


class MIR(TaskFree, Method[MIRParams]):
    name = "mir"
    default_memory_policy = "reservoir"

    def online_train(self, stream: Tensor, iterations: int) -> None:
        n_memory = self.cfg.batch_size - len(stream)
        for _ in range(iterations):
            if len(self.memory) == 0 or n_memory <= 0:
                self.train_batches([stream], [len(stream)])
                continue
            x_s = self.augmented(self.images_of(stream), len(stream) + n_memory, role="stream")
            y_s = self.labels_of(stream)
            chosen = self.retrieve(x_s, y_s, self.memory_draw(self.params.mir_candidates), n_memory)
            x_m = self.augmented(self.images_of(chosen), len(stream) + n_memory, role="memory")
            self.model.train()
            self.step_on(torch.cat([x_s, x_m]), torch.cat([y_s, self.labels_of(chosen)]), len(stream))

    def online_start(self) -> None:
        super().online_start()
        # the retrieval's CUDA graphs by (stream, candidates, k, all classes seen): `retrieve`
        self.retrievals: dict[tuple[int, int, int, bool], CapturedCall] = {}

    def retrieve(self, x_s: Tensor, y_s: Tensor, candidates: Tensor, k: int) -> Tensor:
        """The k candidates (train indices) whose loss rises most under a virtual SGD step on (x_s, y_s).

        Once the memory holds `mir_candidates` samples the shapes are the same every update: the
        scoring (`scores_order`) is replayed as a CUDA graph where the training step is (its
        inputs copied in, the lr the optimiser's device tensor), and on CPU counted as a graph's
        body; the draws and augmentations stay outside it."""
        if len(candidates) <= k:
            return candidates
        images_c = self.images_of(candidates)  # uint8, normalised by `scores_order` (in the graph)
        y_c = self.labels_of(candidates)
        lr = self.step_lr()
        if len(candidates) < self.params.mir_candidates:  # the memory still fills: new shapes each update
            order = self.scores_order(x_s, y_s, images_c, y_c, lr, k)
        elif self.stepper.graphed(len(x_s) + k, tuple(x_s.shape[1:])):
            # the step's rate, set now (step_on sets the same, `step_lr` unchanged until its step:
            # no second fill, graphs.set_lr), read by the graph from the optimiser's tensor
            assert self.optimizer is not None
            set_lr(self.optimizer, lr)
            order = self.retrieval(x_s, y_s, images_c, y_c, k)(x_s, y_s, images_c, y_c)
        else:
            with graphable():  # what the graph replays on a GPU (counted apart by an active step_audit)
                order = self.scores_order(x_s, y_s, images_c, y_c, lr, k)
        self.cost += 3 * len(x_s) + 2 * len(images_c)
        ledger_of(self).add("train", x_s.shape)  # the look-ahead's forward + backward
        ledger_of(self).add("forward", images_c.shape, 2)  # the candidates at theta and theta'
        # the choice stays on the device (train indices index the device's images): no host sync
        return candidates.to(order.device)[order]

    def retrieval(self, x_s: Tensor, y_s: Tensor, images_c: Tensor, y_c: Tensor, k: int) -> CapturedCall:
        """The retrieval's graph for these shapes, made anew with a new model, optimiser or seen
        mask; it reads the learning rate from the optimiser's tensor (`retrieve` sets it)."""
        key = (len(x_s), len(images_c), k, self.all_seen)
        cached = self.retrievals.get(key)
        if cached is None or not made_for(cached, self):
            if cached is not None:
                self.retrievals.clear()  # all made for the replaced model, optimiser or mask
            assert self.optimizer is not None
            lr = self.optimizer.param_groups[0]["lr"]  # set_lr fills every group with the step's rate
            assert isinstance(lr, Tensor), "a graphed retrieval's optimiser is graph_ready_optimizer's"

            def body(x_s: Tensor, y_s: Tensor, images_c: Tensor, y_c: Tensor) -> Tensor:
                return self.scores_order(x_s, y_s, images_c, y_c, lr, k)

            cached = self.retrievals[key] = CapturedCall(
                body,
                (x_s, y_s, images_c, y_c),
                self.model,
                self.optimizer,
                self.seen,
                f"MIR's retrieval ({len(images_c)} candidates)",
                self.report.log,
            )
        return cached

    def scores_order(
        self, x_s: Tensor, y_s: Tensor, images_c: Tensor, y_c: Tensor, lr: Tensor | float, k: int
    ) -> Tensor:
        """Device work only (a CUDA graph's body): the look-ahead on (x_s, y_s), the virtual step
        at `lr` (a float, or a device tensor in a graph), the candidates' loss rise (their uint8
        `images_c` normalised here: a graph copies in the raw images), the top k."""
        x_c = self.accel.prepare(self.setup.augmenter.test(images_c))
        train_mode = self.params.mir_score_mode == "train"
        self.model.train()
        names, params = zip(*[(n, p) for n, p in self.model.named_parameters() if p.requires_grad])
        live = dict(self.model.named_buffers())
        # eval: the look-ahead runs on copies of the batch-norm statistics; train: on the model's own (they move)
        buffers = live if train_mode else copies(live)
        logits = functional_call(self.model, {**dict(zip(names, params)), **buffers}, (x_s,))
        loss = nnf.cross_entropy(self.mask_unseen(logits), y_s)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        virtual = {n: p.detach() for n, p, g in zip(names, params, grads) if g is None}
        stepped = [(n, p, g) for n, p, g in zip(names, params, grads) if g is not None]
        if stepped:
            moved = stepped_away([p for _, p, _ in stepped], [g for *_, g in stepped], lr)
            virtual.update({n: m for (n, _, _), m in zip(stepped, moved)})
        # train: theta' is scored on a copy of the statistics (theirs: a deep copy of the model)
        virtual.update(copies(live) if train_mode else live)
        self.model.train(train_mode)
        with torch.no_grad():
            before = nnf.cross_entropy(self.mask_unseen(self.model(x_c)), y_c, reduction="none")
            after = nnf.cross_entropy(
                self.mask_unseen(functional_call(self.model, virtual, (x_c,))), y_c, reduction="none"
            )
        self.model.train()
        return torch.argsort(after - before, descending=True, stable=True)[:k]
