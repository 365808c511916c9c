"""OnPro: online prototype learning (Wei et al., ICCV 2023, "Online Prototype Learning for Online
Continual Learning").

The model gains a projection head (a linear layer, feature width -> `onpro_projection`, the
authors' `simclr` layer); z = its output, normalised. Each step trains on two views of the
stream batch and of a memory batch (each image's views: two independent draws of the run's
augmentation) and adds, as the authors' code does:

- OPE, online prototype equilibrium: per class present in a batch, its prototype in each view
  (the mean z of its samples); each prototype's positive is its class's prototype in the other
  view, its negatives every other prototype of both views (temperature `onpro_proto_temperature`):
  once over the stream batch (the "new" prototypes) and once over the memory batch as drawn
  (the "seen" ones);
- the instance-wise contrastive loss OnPro takes from OCM: each image in 16 rotations (the
  left / right half turned by 180 degrees, or both, or neither, then the whole image by 0, 180,
  90 or 270 degrees), each rotation its own class (label + n_classes x rotation); similarities
  `onpro_sim_scale` x (z z' + z f'), f the normalised features cut to z's width at a random
  offset (scale 1 in the first task), an OCM NT-Xent with temperature `onpro_ins_temperature`
  (the stream's without an anchor's own term, the memory's with it, as theirs);
- APF, adaptive prototypical feedback (after the first task): the memory batch is mixed before
  the two losses above see it. Its first `onpro_mixup_base_rate` share: each sample, with
  probability `onpro_mixup_p`, mixed with a random partner of that share, weight U(0,
  `onpro_mixup_upper`). The rest: each sample a mix of a sample of class a and one of class b,
  the pair (a, b) drawn with probability softmax(1 / distance) over the pairs of the classes'
  prototypes (the mean of the seen prototypes' two views): the closest, most confused, classes
  are mixed most; a pair is mixed with probability `onpro_mixup_p` (one draw per pair and step),
  weight Beta(`onpro_mixup_alpha`, same);
- cross-entropy: in the first task on the stream batch; after it on the mixed memory batch
  alone (the mixing weight sharing the two labels' terms), as theirs.

Memory batch: min(`onpro_memory_batch`, |memory|) samples in the first task, then at most
`onpro_memory_per_class` x the classes seen, uniform from the follow-up's reservoir memory
(K - batch/2 slots). The head has every class's row from the start (a class's arrival leaves
its row as it is); predictions are the head's arg-max over the classes seen.

Task-free adaptation: the i-Blurry stream has task boundaries and OnPro's first task differs
(no feedback mixing, cross-entropy on the stream): "the first task" is the task the protocol
numbers 0.

Deviations from the authors' code (labelled in docs/anytime.md):
- views: two independent draws of the run's augmentation (theirs: the image as it comes and one
  view of their recipe: horizontal flip, greyscale 0.25, resized crop 0.3-1); the mixing of the
  memory batch is applied to both views with the same partners and weights (theirs mixes, then
  makes the view);
- the cross-entropy's logits are the head's on the unrotated second view (theirs: another
  forward of another view); one forward per set of images (as few as the losses allow);
- the feedback share: each of its samples draws its class pair, and its two samples from the
  step's memory batch (theirs: the pairs' counts are the rounded expected counts, the samples
  drawn from the whole memory); the prototypes are this step's seen prototypes (theirs: the
  previous step's); with a single class in the batch, a pair is that class with itself (theirs
  fails);
- the first step of every later task mixes as well (theirs: plain memory batch and cross-entropy
  at each task's first batch);
- the run's optimiser and batch (the follow-up's Adam 3e-4, batch/2 stream samples; theirs Adam
  5e-4, betas (0.9, 0.99), weight decay 1e-4, 10 stream samples), no mixed precision.

No host sync in the step: every selection is a fixed-shape tensor operation (Gumbel arg-max over
the class pairs, a masked arg-max over the batch's rows); the random numbers are drawn on the
host from the method's own generators.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ..compute import ledger_of
from ..learner import Task
from .base import Method
from .ocm import (
    EPS,
    N_TRANSFORMS,
    StepOffsets,
    minus_log_p,
    ocm_transforms,
    similarity,
    transform_labels,
    two_view_rows,
)
from .onpro_params import OnProParams
from .taskfree import TaskFree

ROTATIONS = N_TRANSFORMS  # OCM's rotations: 4 half-turns x 4 quarter-turns
rotation_labels = transform_labels  # the label of each rotation: label + n_classes x rotation


def rotations(x: Tensor) -> Tensor:
    """OCM's 16 rotated copies of a batch (N, C, H, W), block r = 4 q + h (rows r N .. (r + 1) N):
    h the halves turned by 180 degrees (0: none, 1: the left, 2: both, 3: the right), q the whole
    image's turn in the authors' order (0, 180, 90, 270 degrees)."""
    return ocm_transforms(x, turns=(0, 2, 1, 3))


def instance_loss(sim: Tensor, labels: Tensor, temperature: float, without_self: bool) -> Tensor:
    """OCM's NT-Xent over the similarities of [view 1 (B rows), view 2 (B rows)] of B labelled
    rows: `minus_log_p` of each pair (an anchor's own entry left out `without_self`), averaged
    over each row's same-label columns; `without_self` (the stream's), twice that plus each row's
    term with its other view. Unlike OCM's `new_data_infonce` it keeps the authors' constant
    -log(eps) of the excluded self-pair (no gradient; it shows in the loss's value)."""
    b = sim.shape[0] // 2
    nll = minus_log_p(
        sim, temperature, torch.eye(len(sim), dtype=torch.bool, device=sim.device) if without_self else None
    )
    both = labels.repeat(2)
    same = (both[:, None] == both[None, :]).to(nll.dtype)
    same = same / (same.sum(1, keepdim=True) + EPS)
    # not shared with ocm.new_data_infonce: OnPro's authors' formula (self-pair's -log(eps) kept, count + eps, one sum)
    loss = (same * nll).sum() / (2 * b)
    if not without_self:
        return loss
    return 2 * loss + (nll[:b, b:].diagonal().sum() + nll[b:, :b].diagonal().sum()) / (2 * b)


def class_prototypes(z: Tensor, y: Tensor, n_classes: int) -> tuple[Tensor, Tensor]:
    """(per-class mean of the rows of z (zero for a class absent), which classes are present)."""
    onehot = torch.zeros(len(y), n_classes, dtype=z.dtype, device=z.device).scatter_(1, y[:, None], 1.0)
    counts = onehot.sum(0)
    return onehot.T @ z / counts.clamp_min(1.0)[:, None], counts > 0


def prototype_loss(
    z1: Tensor, z2: Tensor, y: Tensor, n_classes: int, temperature: float
) -> tuple[Tensor, Tensor, Tensor]:
    """OPE: the contrastive loss of the classes' prototypes in two views (positive: the same
    class's in the other view; negatives: every other present prototype of both views), averaged
    over the present prototypes. Returns (loss, the mean of the two views' prototypes, present)."""
    p1, present = class_prototypes(z1, y, n_classes)
    p2, _ = class_prototypes(z2, y, n_classes)
    p = nnf.normalize(torch.cat([p1, p2]), dim=1)
    valid = present.repeat(2)
    logits = p @ p.T / temperature
    others = valid[None, :] & ~torch.eye(len(p), dtype=torch.bool, device=p.device)
    log_den = torch.logsumexp(logits.masked_fill(~others, float("-inf")), dim=1)
    positive = logits.diagonal(n_classes).repeat(2)  # row i's other view: i + C (first half), i - C
    per_row = (log_den - positive).masked_fill(~valid, 0.0)
    return per_row.sum() / valid.sum().clamp_min(1), (p1 + p2) / 2, present


def pair_logits(prototypes: Tensor, present: Tensor) -> Tensor:
    """(C, C) log-weights of the class pairs APF mixes: 1 / distance of the two prototypes for
    a < b both present, -inf elsewhere; with fewer than two classes present, 0 on a present
    class's own pair (it is mixed with itself)."""
    n = len(present)
    dist = torch.cdist(prototypes, prototypes).clamp_min(1e-12)
    both = present[:, None] & present[None, :]
    upper = both & torch.ones(n, n, dtype=torch.bool, device=present.device).triu(1)
    pairs = torch.where(upper, 1.0 / dist, float("-inf"))
    itself = torch.where(torch.diag(present), 0.0, float("-inf"))
    return torch.where(upper.any(), pairs, itself)


@dataclass
class FeedbackDraws:
    """The random numbers of one step's APF, drawn on the host (fixed shapes)."""

    partner: Tensor  # (n_base,) a permutation of the base share
    base_coin: Tensor  # (n_base,) uniform: mixed where < mixup_p
    base_weight: Tensor  # (n_base,) U(0, upper)
    pair_noise: Tensor  # (n_rest, C x C) uniform, for a Gumbel arg-max over the pairs
    row_a: Tensor  # (n_rest, n_memory) uniform: the sample of class a (masked arg-max)
    row_b: Tensor  # (n_rest, n_memory)
    pair_coin: Tensor  # (C x C,) uniform: a pair is mixed this step where < mixup_p
    pair_weight: Tensor  # (n_rest,) Beta(alpha, alpha)

    def to(self, device: torch.device) -> FeedbackDraws:
        return FeedbackDraws(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def draw_feedback(
    n_memory: int, params: OnProParams, n_classes: int, gen: torch.Generator, rng: random.Random
) -> FeedbackDraws:
    n_base = int(n_memory * params.onpro_mixup_base_rate)
    n_rest = n_memory - n_base
    return FeedbackDraws(
        torch.randperm(n_base, generator=gen),
        torch.rand(n_base, generator=gen),
        torch.rand(n_base, generator=gen) * params.onpro_mixup_upper,
        torch.rand(n_rest, n_classes * n_classes, generator=gen).clamp(1e-12, 1 - 1e-7),
        torch.rand(n_rest, n_memory, generator=gen),
        torch.rand(n_rest, n_memory, generator=gen),
        torch.rand(n_classes * n_classes, generator=gen),
        torch.tensor([rng.betavariate(params.onpro_mixup_alpha, params.onpro_mixup_alpha) for _ in range(n_rest)]),
    )


def feedback_mix(
    views: tuple[Tensor, Tensor], y: Tensor, prototypes: Tensor, present: Tensor, d: FeedbackDraws, mixup_p: float
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """APF on a memory batch (both views, the same mixing): (view 1, view 2, label a, label b,
    weight of b), each `len(y)` rows: the base share, then the prototype-fed share."""
    n_base = len(d.partner)
    x1, x2 = views
    weight = d.base_weight.to(x1.dtype) * (d.base_coin < mixup_p).to(x1.dtype)
    n = len(present)
    pair = (pair_logits(prototypes, present).flatten()[None] - torch.log(-torch.log(d.pair_noise))).argmax(1)
    a, b = pair // n, pair % n
    rows_a = d.row_a.masked_fill(y[None, :] != a[:, None], -1.0).argmax(1)
    rows_b = d.row_b.masked_fill(y[None, :] != b[:, None], -1.0).argmax(1)
    fed = d.pair_weight.to(x1.dtype) * (d.pair_coin[pair] < mixup_p).to(x1.dtype)
    lam = torch.cat([weight, fed])
    first = torch.cat([torch.arange(n_base, device=y.device), rows_a])
    second = torch.cat([d.partner.to(y.device), rows_b])
    shape = (-1,) + (1,) * (x1.dim() - 1)

    def mix(x: Tensor) -> Tensor:
        return (1 - lam.view(shape)) * x[first] + lam.view(shape) * x[second]

    return mix(x1), mix(x2), y[first], y[second], lam


@dataclass
class StepDraws:
    """One step's host draws, in the order the eager step makes them: the stream contrast's
    feature offset, then (a later task's step with memory) APF's draws and the mixed contrast's
    offset."""

    offsets: list[int]
    feedback: FeedbackDraws | None


class OnPro(TaskFree, Method[OnProParams]):
    name = "onpro"
    default_memory_policy = "reservoir"
    # captured as a CUDA graph (graphs.MethodStep): `step_key` makes the step's host draws (APF's
    # and the feature offsets) and copies them into device tensors the graph reads as data; the
    # key is the stream count, whether APF runs and whether the task's similarity scale applies
    capturable_step = True
    kept_state: tuple[str, ...] = ("projection",)  # the projection head (memory bytes)

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        d = self.model.feature_dim
        self.projection = nn.Linear(d, min(self.params.onpro_projection, d)).to(self.device)
        self.task_index = 0
        self.onpro_gen = torch.Generator().manual_seed(6_113 * (self.cfg.seed + 1))  # APF's draws
        self.onpro_rng = random.Random(self.cfg.seed + 17)  # mixing weights (Beta) and feature offsets
        self.pending: StepDraws | None = None  # the draws `step_key` made for the next step
        self.offsets = StepOffsets(self.device)  # this step's feature offsets: the eager step's and a graph's
        # APF's draws as a graph reads them (device tensors by field), by memory rows (their shapes):
        # a graph keeps the tensors it was captured with
        self.feedback: dict[int, dict[str, Tensor]] = {}

    def make_optimizer(self) -> torch.optim.Optimizer:
        optimizer = super().make_optimizer()
        if self.task_free:  # the projection head learns with the model
            optimizer.add_param_group({"params": list(self.projection.parameters())})
        return optimizer

    def online_task_start(self, task: Task) -> None:
        self.task_index = task.index

    def _memory_batch(self) -> int:
        """Memory samples per step: the batch size, capped after the first task by the seen classes."""
        if self.task_index == 0:
            return self.params.onpro_memory_batch
        return min(self.params.onpro_memory_batch, self.params.onpro_memory_per_class * self.n_seen)

    def online_train(self, stream: Tensor, iterations: int) -> None:
        n_memory = self._memory_batch()
        batches = []
        for _ in range(iterations):
            batch = torch.cat([stream, self.memory_draw(n_memory)])
            batches.append(torch.cat([batch, batch]))  # two views: each image is augmented on its own
        self.train_batches(batches, [len(stream)] * iterations)

    def embed(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(features, normalised projections) of a batch."""
        f = self.model.features(x)
        return f, nnf.normalize(self.projection(f), dim=1)

    def offset(self, width: int) -> int:
        """Where the features are cut to the projections' width (the authors' random offset)."""
        return self.onpro_rng.randrange(max(self.model.feature_dim - width, 1))

    def contrast(
        self, views: tuple[Tensor, Tensor], labels: Tensor, scale: float, without_self: bool, offset: int | Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The instance-wise loss over the rotations of two views: (loss, features, projections)."""
        f, z = self.embed(torch.cat([rotations(views[0]), rotations(views[1])]))
        sim = similarity(z, nnf.normalize(f, dim=1), offset, scale)
        loss = instance_loss(
            sim, rotation_labels(labels, self.n_classes), self.params.onpro_ins_temperature, without_self
        )
        return loss, f, z

    def split(self, x: Tensor) -> tuple[int, int, int, bool]:
        """(n, stream rows, memory rows, whether APF runs) of a step's batch of two views."""
        n, n_s = two_view_rows(x, self.stream_count)
        return n, n_s, n - n_s, self.task_index > 0 and n > n_s

    def host_side(self, x: Tensor) -> StepDraws:
        """The step's draws, in the eager step's order, and its extra passes charged to the ledger."""
        _, n_s, n_m, later = self.split(x)
        width = self.projection.out_features
        passes = 32 * n_s + (2 + 32 * later) * n_m  # images through the model (32: 16 rotations x 2 views)
        if passes > len(x):  # the step counts its 2n images (step_on): the rest here
            ledger_of(self).add("train", (passes - len(x), *x.shape[1:]))
        offsets = [self.offset(width)]
        feedback = draw_feedback(n_m, self.params, self.n_classes, self.onpro_gen, self.onpro_rng) if later else None
        if later:
            offsets.append(self.offset(width))
        return StepDraws(offsets, feedback)

    def step_key(self, x: Tensor, y: Tensor) -> tuple[int, bool, bool]:
        """The host side, before the step (a replay runs no Python): the draws made and copied
        into the device tensors a graph reads."""
        _, n_s, _, later = self.split(x)
        self.pending = self.host_side(x)
        self.offsets.hold(self.pending.offsets)
        drawn = self.pending.feedback
        if drawn is not None:
            n_m = drawn.row_a.shape[1]
            if n_m not in self.feedback:
                self.feedback[n_m] = {
                    f: getattr(drawn, f).to(self.device, copy=True) for f in FeedbackDraws.__dataclass_fields__
                }
            else:
                for f, buffer in self.feedback[n_m].items():
                    buffer.copy_(getattr(drawn, f), non_blocking=True)
        return n_s, later, self.task_index > 0

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        if self.pending is None:  # a direct call: its draws made here
            self.step_key(x, y)
        drawn, self.pending = self.pending, None
        assert drawn is not None
        graph = self.mix_graph is not None  # inside a CUDA graph: the draws as data
        p, c = self.params, self.n_classes
        n, n_s, n_m, later = self.split(x)
        scale = p.onpro_sim_scale if self.task_index > 0 else 1.0
        y_s, y_m = y[:n_s], y[n_s:n]
        loss, f, z = self.contrast((x[:n_s], x[n : n + n_s]), y_s.to(x.dtype), scale, True, self.offsets.at(0, graph))
        b = ROTATIONS * n_s
        loss = loss + prototype_loss(z[:n_s], z[b : b + n_s], y_s, c, p.onpro_proto_temperature)[0]
        if n_m:
            _, zm = self.embed(torch.cat([x[n_s:n], x[n + n_s :]]))
            seen_loss, prototypes, present = prototype_loss(zm[:n_m], zm[n_m:], y_m, c, p.onpro_proto_temperature)
            loss = loss + seen_loss
        if not later:
            return loss + nnf.cross_entropy(self.mask_unseen(self.model.fc(f[b : b + n_s])), y_s)
        assert drawn.feedback is not None
        draws = FeedbackDraws(**self.feedback[n_m]) if graph else drawn.feedback.to(x.device)
        m1, m2, y_a, y_b, lam = feedback_mix(
            (x[n_s:n], x[n + n_s :]), y_m, prototypes.detach(), present, draws, p.onpro_mixup_p
        )
        mixed_labels = (1 - lam) * y_a.to(lam.dtype) + lam * y_b.to(lam.dtype)
        ins, fm, _ = self.contrast((m1, m2), mixed_labels, scale, False, self.offsets.at(1, graph))
        logits = self.mask_unseen(self.model.fc(fm[ROTATIONS * n_m : ROTATIONS * n_m + n_m]))
        ce = (1 - lam) * nnf.cross_entropy(logits, y_a, reduction="none") + lam * nnf.cross_entropy(
            logits, y_b, reduction="none"
        )
        return loss + ins + ce.mean()

    def head_takes(self, label: int) -> None:
        """The arriving class's row is the one it always had (the authors' head spans every class)."""

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "onpro": {
                "projection": self.projection.state_dict(),
                "task_index": self.task_index,
                "gen": self.onpro_gen.get_state(),
                "rng": self.onpro_rng.getstate(),
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        onpro = state["onpro"]
        self.projection.load_state_dict(onpro["projection"])
        self.task_index = int(onpro["task_index"])
        self.onpro_gen.set_state(onpro["gen"])
        self.onpro_rng.setstate(onpro["rng"])
        super().load_state_dict(state)
