"""OCM: online continual learning through mutual information maximization (Guo, Liu and Zhao,
ICML 2022).

Every sample is seen in 16 transformed copies (`ocm_transforms`): its left and right halves
(by width) each turned 180 degrees in place or not (4 combinations), then the whole image turned
by 0, 90, 180 or 270 degrees; each copy gets a label of its own (class, transform), so the
contrastive losses learn the classes *and* the transforms (the paper's "holistic"
representations). A projection head (feature_dim -> `ocm_projection`) gives the InfoNCE
embedding z; the similarity of two rows i, j is

    s_ij = 0.5 cos(z_i, z_j) + 0.5 <z_i / |z_i|, (f_j / |f_j|)[o : o + p]>,

f the backbone's feature, o a random offset in [0, feature_dim - p) drawn per step (one for the
stream's block, one for the memory's), p = `ocm_projection`. Each step forwards two views of every
sample's 16 copies: the clean image and the run's augmentation of it.

Losses (temperature tau = `ocm_temperature`, labels = (class, transform)):
- L_new, on the stream samples' 2 x 16 copies (`new_data_infonce`, the authors'
  Supervised_NT_xent_n): each row's softmax over the other rows; -log p of the row's other view,
  plus 2 x the mean over positives (same label, itself excluded) of -log p, divided by the
  positives' count with the row itself;
- L_mem, on the memory samples' 2 x 16 copies (`supervised_infonce`, their
  Supervised_NT_xent_uni): the softmax over every row, itself included, and the mean over the
  same-label rows (itself included) of -log p;
- L_pre, the mutual information between the current and the previous model on the memory samples'
  clean copies (their Supervised_NT_xent_pre): `supervised_infonce` of cos(z_i, z'_j), z' the
  previous model's projection (a copy of model and head taken at each task boundary, run in
  train mode as theirs, without gradients);
- cross-entropy of the augmented, untransformed memory samples (their task 0: of the stream
  samples), over the classes seen. CutMix is not applied (the losses pair copies by label).

Before the first task boundary (no previous model: the authors' first task) a step is the
stream batch alone and its loss CE(stream) + L_new; from it on, the stream batch plus
min(`ocm_memory_batch`, `ocm_memory_per_class` x classes seen, |memory|) memory samples, and the
loss CE(memory) + L_new + L_mem + L_pre (the authors' code: the stream's cross-entropy stops
after the first task; stream samples reach it through the memory). Predictions: the head's
arg-max over the classes seen. Memory: the follow-up's reservoir (K - batch/2 slots), filled
after each step as theirs.

Deviations from the authors' code (gydpku/OCM test_cifar10.py, test_mnist.py and
InfoNCE/contrastive_learning.py, read as the specification; labelled in docs/anytime.md):
- the second view is the run's augmentation of the image, transformed after it (theirs: the
  transformed copies, then a resized crop of scale 0.3-1, plus a flip on CIFAR), and the
  cross-entropy reads that view's untransformed rows of the same forward (theirs: a third draw,
  a forward of its own);
- one forward of the stream and memory copies together (as theirs), but the self-pair's
  constant term of L_new (-log 1e-8 in theirs, without gradient) is left out;
- the first task's similarity weights are 0.5 / 0.5 as in every later task (their CIFAR scripts
  use 1 / 1 in the first task, their MNIST script 0.5 / 0.5);
- their CIFAR-10 script's extra MSE between the previous and current logits of the old classes is
  not applied (it is not in the paper's objective, nor in their MNIST or CIFAR-100 scripts);
- the head covers every class from the start, unseen classes masked (theirs: every class, no
  mask), a class's row kept as it is when the class arrives;
- i-Blurry's task boundaries are the tasks' (theirs: disjoint tasks);
- the run's optimiser and stream batch (the follow-up's Adam 3e-4, batch/2 stream samples;
  theirs Adam 1e-3, betas 0.9/0.99, weight decay 1e-4, 10 stream samples).

Compute: the 2 x 16 copies' forward and backward are counted as training passes and the previous
model's forward as a forward pass (cl/compute.py's ledger); the projection head and the
similarities are outside the backbone, not counted.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ..compute import ledger_of
from ..learner import Task
from ..models import Backbone
from .base import Method
from .ocm_params import OCMParams
from .taskfree import TaskFree

N_TRANSFORMS = 16  # 4 half-turn combinations x 4 whole-image rotations
EPS = 1e-8  # the authors' -log(p + eps): a positive below eps adds -log(eps) and no gradient


def two_view_rows(x: Tensor, stream_count: int | None) -> tuple[int, int]:
    """(rows of one view, the stream's rows of them) of a step's batch of two views, each
    [stream, memory] (OCM's and OnPro's steps): no stream count means the stream alone."""
    n = len(x) // 2
    return n, n if stream_count is None else stream_count


class StepOffsets:
    """A step's feature offsets in the two shapes its two paths read, filled together by `hold`:
    host ints in the eager step's draw order (its slices) and their copy in a device tensor a
    CUDA graph reads as data (the same columns through `index_select`)."""

    def __init__(self, device: torch.device, most: int = 2) -> None:
        self._host: list[int] = []  # the eager step's offsets, in draw order
        self.data = torch.zeros(most, dtype=torch.long, device=device)

    def __len__(self) -> int:
        """Host offsets held for the eager step (none after `release`)."""
        return len(self._host)

    def hold(self, drawn: list[int]) -> None:
        self._host = list(drawn)
        self.data[: len(drawn)].copy_(torch.tensor(drawn), non_blocking=True)

    def at(self, i: int, graphed: bool, draw: Callable[[], int] | None = None) -> int | Tensor:
        """The i-th offset: the device's copy inside a graph, the host's int eagerly; eagerly, one
        not held is drawn now by `draw` and kept (a direct call of a step's loss: no `hold`)."""
        if graphed:
            return self.data[i]
        while draw is not None and len(self._host) <= i:
            self._host.append(draw())
        return self._host[i]

    def release(self) -> None:
        """The eager step used its offsets: the next one is held or drawn anew."""
        self._host = []


def ocm_transforms(images: Tensor, turns: tuple[int, ...] = (0, 1, 2, 3)) -> Tensor:
    """OCM's 16 copies of (N, C, H, W) square images, (16 N, C, H, W): copy t = 4 r + h at rows
    t N : (t + 1) N, h the halves turned 180 degrees in place (none, left, both, right; halves by
    width, a middle column of an odd width kept), r the whole image turned turns[r] x 90 degrees.
    The order of `turns` changes only the rounding of the losses' sums (each block has its own
    label): OnPro keeps its authors' (0, 2, 1, 3), so each method's seeded runs stay as they were."""
    w = images.shape[-1]
    half = w // 2
    left, mid, right = images[..., :half], images[..., half : w - half], images[..., w - half :]
    left_t, right_t = left.flip(-2, -1), right.flip(-2, -1)  # a 180-degree turn
    inner = torch.cat(
        [
            images,
            torch.cat([left_t, mid, right], -1),
            torch.cat([left_t, mid, right_t], -1),
            torch.cat([left, mid, right_t], -1),
        ]
    )
    return torch.cat([torch.rot90(inner, r, (-2, -1)) for r in turns])


def transform_labels(y: Tensor, n_classes: int) -> Tensor:
    """The label of each of `ocm_transforms`' copies: class + n_classes x transform index."""
    offsets = torch.arange(N_TRANSFORMS, device=y.device)[:, None] * n_classes
    return (offsets + y[None, :]).flatten()


def similarity(zn: Tensor, fn: Tensor, offset: int | Tensor, scale: float) -> Tensor:
    """scale x (<zn_i, zn_j> + <zn_i, fn_j[offset : offset + p]>) of normalised projections zn
    (width p) and normalised features fn: OCM's scale is 0.5, OnPro's a parameter. `offset` a
    device tensor (inside a CUDA graph: the draw as data) picks the same columns by index."""
    if isinstance(offset, Tensor):
        cut = fn.index_select(1, offset + torch.arange(zn.shape[1], device=fn.device))
    else:
        cut = fn[:, offset : offset + zn.shape[1]]
    return scale * (zn @ cut.T + zn @ zn.T)


def ocm_similarity(z: Tensor, features: Tensor, offset: int | Tensor) -> Tensor:
    """0.5 cos(z_i, z_j) + 0.5 <z_i / |z_i|, (f_j / |f_j|)[offset : offset + p]>, p = z's width."""
    return similarity(nnf.normalize(z, dim=1), nnf.normalize(features, dim=1), offset, 0.5)


def minus_log_p(sim: Tensor, temperature: float, excluded: Tensor | None) -> Tensor:
    """-log(p + eps), p = e_ij / (sum_j e_ij + eps), e_ij = exp((s_ij - max_j s_ij) / tau) and 0 where
    `excluded`: the authors' numerics (the row's maximum taken before the exclusion, so a row
    whose other entries are all far below its excluded one gets its eps-limited values)."""
    e = torch.exp((sim - sim.amax(1, keepdim=True).detach()) / temperature)
    if excluded is not None:
        e = e.masked_fill(excluded, 0.0)
    return -torch.log(e / (e.sum(1, keepdim=True) + EPS) + EPS)


def supervised_infonce(sim: Tensor, row_labels: Tensor, col_labels: Tensor, temperature: float) -> Tensor:
    """Mean over rows of the mean over same-label columns of -log(softmax_row(sim / tau) + eps)
    (the authors' Supervised_NT_xent_uni and _pre: nothing excluded, a row with no positive adds 0)."""
    loss = minus_log_p(sim, temperature, None)
    positive = (row_labels[:, None] == col_labels[None, :]).to(sim.dtype)
    return ((loss * positive).sum(1) / positive.sum(1).clamp_min(1.0)).mean()


def new_data_infonce(sim: Tensor, labels: Tensor, temperature: float) -> Tensor:
    """The authors' Supervised_NT_xent_n on (2M, 2M) similarities of two views (rows :M and M:,
    the same samples in the same order): each row's softmax over the other rows, -log(p + eps); the
    mean of that of (row, its other view) plus 2 x the mean over rows of its sum over positives
    (same label, not itself) divided by the same-label count with the row itself."""
    n = len(sim)
    m = n // 2
    eye = torch.eye(n, dtype=torch.bool, device=sim.device)
    loss = minus_log_p(sim, temperature, eye)
    pair = torch.cat([loss[:m, m:].diagonal(), loss[m:, :m].diagonal()])
    same = labels[:, None] == labels[None, :]
    positive = loss.masked_fill(~same | eye, 0.0).sum(1) / same.sum(1).to(sim.dtype)
    # not shared with onpro.instance_loss: OCM's authors' formula (self-pair left out, count without eps, row means)
    return pair.mean() + 2.0 * positive.mean()


class OCM(TaskFree, Method[OCMParams]):
    name = "ocm"
    default_memory_policy = "reservoir"
    # captured as a CUDA graph (graphs.MethodStep): `step_key` draws the step's feature offsets on
    # the host and writes them into `offsets` (the graph reads them as data, the eager step as
    # ints: the same columns); the previous model is snapshotted in place; the key is the stream
    # count and whether the step is a first-task one
    capturable_step = True
    kept_state: tuple[str, ...] = ("projection", "previous")  # projection head, previous model + head

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        _, h, w = setup.data.image_shape
        d, p = self.model.feature_dim, self.params.ocm_projection
        if h != w:
            raise ValueError(f"ocm: images must be square for its 90-degree rotations, not {h}x{w}")
        if d <= p:
            raise ValueError(f"ocm: ocm_projection {p} must be below the model's feature width {d}")
        self.projection = nn.Linear(d, p).to(self.device)  # the authors' `simclr` head
        self.previous: tuple[Backbone, nn.Module] | None = None  # model and head at the last task boundary
        self.offsets = StepOffsets(self.device)  # this step's draws: the eager step's and a graph's

    def make_optimizer(self) -> torch.optim.Optimizer:
        optimizer = super().make_optimizer()
        if self.task_free:  # the projection head learns with the model
            optimizer.add_param_group({"params": list(self.projection.parameters())})
        return optimizer

    def online_task_end(self, task: Task) -> None:
        """The previous model of L_pre: the model and its projection head as they are now."""
        self.snapshot()

    def snapshot(self) -> None:
        """A copy of the model and head; after the first, written into the same tensors (a graph
        captured with them stays valid)."""
        if self.previous is not None:
            with torch.no_grad():
                for old, new in ((self.previous[0], self.model), (self.previous[1], self.projection)):
                    for dst, src in zip(old.state_dict().values(), new.state_dict().values(), strict=True):
                        dst.copy_(src)
            return
        model, head = copy.deepcopy(self.model), copy.deepcopy(self.projection)
        for p in [*model.parameters(), *head.parameters()]:
            p.requires_grad_(False)
        self.previous = (model, head)

    def memory_count(self) -> int:
        """Memory samples per step: none before the first task boundary, then the authors' rule."""
        if self.previous is None:
            return 0
        return min(self.params.ocm_memory_batch, self.params.ocm_memory_per_class * self.n_seen)

    def online_train(self, stream: Tensor, iterations: int) -> None:
        aug = self.setup.augmenter
        for _ in range(iterations):
            batch = torch.cat([stream, self.memory_draw(self.memory_count())])
            images = self.images_of(batch)
            y = self.labels_of(batch)
            view = self.augmented(images, 2 * len(batch))  # the run's augmentation
            x = torch.cat([aug.test(images), view])  # the clean view first
            self.model.train()
            self.step_on(self.accel.prepare(x), torch.cat([y, y]), len(stream))

    def offset(self) -> int:
        """A random offset of the feature slice, in [0, feature_dim - p) (the host's draw)."""
        span = self.model.feature_dim - self.params.ocm_projection
        return int(torch.randint(span, (1,), generator=self.gen))

    def first_task_step(self, n: int, n_s: int) -> bool:
        """A step of the stream batch alone: before the first boundary, or no memory drawn."""
        return self.previous is None or n_s == n

    def step_key(self, x: Tensor, y: Tensor) -> tuple[int, bool]:
        """The step's host side: its feature offsets drawn (one for the stream's block, then one
        for the memory's), its passes charged to the ledger (a replay runs no Python)."""
        n, n_s = two_view_rows(x, self.stream_count)
        first = self.first_task_step(n, n_s)
        self.offsets.hold([self.offset()] if first else [self.offset(), self.offset()])
        ledger_of(self).add("train", (N_TRANSFORMS * 2 * n - len(x), *x.shape[1:]))  # the copies beyond x
        if not first:
            ledger_of(self).add("forward", (N_TRANSFORMS * (n - n_s), *x.shape[1:]))  # the previous model
        return n_s, first

    def step_offset(self, i: int) -> int | Tensor:
        """The step's i-th feature offset: data inside a CUDA graph, the host's int eagerly
        (drawn now if no `step_key` ran: a direct call of `step_loss`)."""
        return self.offsets.at(i, graphed=self.mix_graph is not None, draw=self.offset)

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        n, n_s = two_view_rows(x, self.stream_count)
        try:
            return self._step_loss(x, y, n, n_s)
        finally:
            self.offsets.release()  # used: the next eager step draws anew

    def _step_loss(self, x: Tensor, y: Tensor, n: int, n_s: int) -> Tensor:
        clean, view, y = x[:n], x[n:], y[:n]
        tau, k = self.params.ocm_temperature, self.n_classes
        copies = torch.cat(
            [
                ocm_transforms(clean[:n_s]),
                ocm_transforms(view[:n_s]),
                ocm_transforms(clean[n_s:]),
                ocm_transforms(view[n_s:]),
            ]
        )
        f = self.model.features(copies)
        z = self.projection(f)
        a = N_TRANSFORMS * n_s  # rows of one view of the stream's copies
        labels_s = transform_labels(y[:n_s], k)
        loss = new_data_infonce(ocm_similarity(z[: 2 * a], f[: 2 * a], self.step_offset(0)), labels_s.repeat(2), tau)
        if self.first_task_step(n, n_s):  # the first task: the stream's cross-entropy
            return loss + nnf.cross_entropy(self.mask_unseen(self.model.fc(f[a : a + n_s])), y[:n_s])
        b = N_TRANSFORMS * (n - n_s)  # rows of one view of the memory's copies
        labels_m = transform_labels(y[n_s:], k)
        z_m, f_m = z[2 * a :], f[2 * a :]
        loss = loss + supervised_infonce(
            ocm_similarity(z_m, f_m, self.step_offset(1)), labels_m.repeat(2), labels_m.repeat(2), tau
        )
        assert self.previous is not None
        old_model, old_head = self.previous
        old_model.train()
        with torch.no_grad():
            z_old = old_head(old_model.features(copies[2 * a : 2 * a + b]))
        sim_pre = nnf.normalize(z_m[:b], dim=1) @ nnf.normalize(z_old, dim=1).T
        loss = loss + supervised_infonce(sim_pre, labels_m, labels_m, tau)
        logits = self.mask_unseen(self.model.fc(f[2 * a + b : 2 * a + b + n - n_s]))  # the memory's view, untransformed
        return loss + nnf.cross_entropy(logits, y[n_s:])

    def head_takes(self, label: int) -> None:
        """The arriving class's row is the one it always had (the authors' head spans every class)."""

    def state_dict(self) -> dict[str, Any]:
        previous = None
        if self.previous is not None:
            previous = {"model": self.previous[0].state_dict(), "head": self.previous[1].state_dict()}
        return {**super().state_dict(), "ocm": {"projection": self.projection.state_dict(), "previous": previous}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ocm = state["ocm"]
        self.projection.load_state_dict(ocm["projection"])
        super().load_state_dict(state)
        self.previous = None
        if ocm["previous"] is not None:
            self.snapshot()  # copies of the right shapes, then their saved values
            assert self.previous is not None
            self.previous[0].load_state_dict(ocm["previous"]["model"])
            self.previous[1].load_state_dict(ocm["previous"]["head"])
