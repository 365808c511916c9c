"""CLIB (Koh et al., ICLR 2022): sample-wise importance memory, memory-only training and an
adaptive learning rate, as the follow-up's code runs it (PROTOCOL §9.4; its clib.py).

Per streamed sample:
1. the sample enters the memory first (K slots, all of them): a full memory counts its classes
   (the incoming one + 1), takes the largest (ties: the earliest seen) and evicts that class's
   sample of LOWEST importance H; a new entry's H is the mean H of its class's other samples
   (alone in its class: 0 when appended, the whole memory's mean H when it replaces a slot);
2. `online_iter` is added to an update budget; int(budget) iterations run, each on
   min(|memory|, batch) memory samples drawn uniformly without replacement (no stream half),
   re-augmented every iteration; then one adaptive-learning-rate call. With
   `train_gflop_per_sample`, iterations run while the run's FLOP credit covers them, each
   charged its step and any importance update it triggers (cl/compute.py, `Credit`).
Importance, after every `imp_update_period`-th iteration: the per-sample loss of the whole
memory (clean images, eval mode) is recomputed; dL = mean over the slots that were neither
replaced nor new of (L_now - L_prev); for B, the memory slots drawn into batches since the last
update, H[B] <- H[B] - 0.1 (dL - mean(H[B]) / |B|) (the follow-up's code, literally: a falling
loss raises the importance of the samples that were trained on).
Adaptive lr: a high lr (lr) and a low one (`lr_step` x lr) alternate every `lr_period` ticks;
from tick 20 on, each phase records the mean loss decrease over unreplaced slots since the last
switch (last `lr_length` records per phase); once both phases have `lr_length` records, Welch's
one-sided t-test (low decreases greater than high?) at 0.05 moves both rates down by `lr_step`
(p < 0.05) or up (p > 0.95), clears the records and flips the phase. The lr is never reset on a
new class, and a new class's head row starts with zero Adam moments (the others are kept).

Deviations, named: an iteration needs two memory samples (batch norm), so the very first
sample trains nothing; a mean over no unreplaced slot is taken as 0 (the follow-up's code would
produce NaN there).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as nnf
from torch import Tensor

from ..augment import TrainDraw
from ..compute import ledger_of
from ..graphs import CapturedCall, made_for
from ..step_audit import DeclaredSync, graphable
from .base import Method
from .clib_params import CLIBParams
from .taskfree import TaskFree

EMA_STEP = 0.1  # the follow-up's 1 - ema_ratio (0.9)
SIGNIFICANCE = 0.05
WARMUP_TICKS = 20


def _mean(values: Tensor) -> float:
    return float(values.mean()) if len(values) else 0.0


class CLIB(TaskFree, Method[CLIBParams]):
    name = "clib"
    default_memory_policy = "reservoir"  # (its own rule below; the name is what the panel shows)
    head_rule = "keep_moments"
    full_capacity = True
    kept_state: tuple[str, ...] = ("importance", "loss", "prev_loss")  # per memory slot (cl/compute.py: memory bytes)
    host_tensors: ClassVar[tuple[str, ...]] = ("importance", "loss", "prev_loss")  # host values by design
    declared_syncs: ClassVar[tuple[DeclaredSync, ...]] = (
        DeclaredSync(
            "Tensor.cpu at clib.py",
            lambda m: math.ceil(m.cfg.memory_size / 512) / m.params.imp_update_period,
            "the importance update reads the whole memory's per-sample losses (one read per 512 "
            "samples, every imp_update_period iterations): which sample a full memory evicts, the "
            "importance EMA and the adaptive lr's t-test are host decisions in CLIB's algorithm",
        ),
    )

    def online_start(self) -> None:
        super().online_start()
        self.importance = torch.zeros(0, dtype=torch.float64)  # H per memory slot
        self.loss = torch.zeros(0, dtype=torch.float64)  # per-slot loss at the last importance update
        self.drawn: list[int] = []  # slots drawn into batches since the last importance update
        self.replaced_since_update: list[int] = []
        self.replaced_since_switch: list[int] = []
        self.update_counter = 0
        self.ticks = 0
        self.prev_loss: Tensor | None = None
        self.lr_is_high = True
        self.high_lr, self.low_lr = self.cfg.lr, self.params.lr_step * self.cfg.lr
        self.high_records: list[float] = []
        self.low_records: list[float] = []
        self.current_lr = self.cfg.lr
        self.importance_graphs: dict[tuple[int, bool], CapturedCall] = {}  # `importance_pass`

    def step_lr(self) -> float:
        return self.current_lr

    # ------------------------------------------------------------------ per sample

    def online_observe(self, index: int, label: int) -> None:
        self.store(index, label)
        if self.credit is not None:  # train_gflop_per_sample: iterations while the FLOP credit covers them
            self.credit.earn()
            if self.on_credit(lambda: self.iterations(1)):
                self.adapt_lr()
            return
        self.num_updates += self.cfg.online_iter
        if self.num_updates >= 1:
            iterations = int(self.num_updates)
            self.iterations(iterations)
            self.num_updates -= iterations
            self.adapt_lr()

    def store(self, index: int, label: int) -> None:
        """Step 1: the sample enters; the largest class loses its least important sample."""
        mem = self.online_memory
        if not mem.full:
            position = mem.append(index, label)
            mine = torch.tensor(mem.by_class[label][:-1], dtype=torch.long)
            h = _mean(self.importance[mine]) if len(mine) else 0.0
            self.importance = torch.cat([self.importance, torch.tensor([h], dtype=torch.float64)])
        else:
            candidates = mem.by_class[mem.largest_class(label)]
            scores = self.importance[torch.tensor(candidates, dtype=torch.long)]
            position = candidates[int(torch.argmin(scores))]  # first of the lowest, in insertion order
            whole = _mean(self.importance)
            mem.put(position, index, label)
            mine = torch.tensor(mem.by_class[label][:-1], dtype=torch.long)
            self.importance[position] = _mean(self.importance[mine]) if len(mine) else whole
        mem.seen += 1
        self.replaced_since_update.append(position)
        self.replaced_since_switch.append(position)

    def iterations(self, n: int) -> None:
        """Step 2, n times: one step on memory samples only, then (every period) the importance
        update. The memory does not change between a sample's iterations, so their batches are
        drawn first and augmented in one call, each with the draw its own call would have made
        (the augmentation's and CutMix's random streams are taken in the per-iteration order):
        the same images and steps as n separate iterations."""
        augmenter = self.setup.augmenter
        h, w = self.setup.data.image_shape[-2:]
        batches: list[tuple[Tensor, Tensor] | None] = []
        draws = []
        for _ in range(n):
            slots = self.online_memory.draw(self.cfg.batch_size, self.gen)
            if len(slots) < 2:
                batches.append(None)
                continue
            batches.append((slots, self.memory.indices[slots]))
            draws.append(augmenter.draw(len(slots), h, w))
            augmenter.plan_mix([len(slots)], h, w)  # the step's CutMix, drawn where it would be
        kept = [b for b in batches if b is not None]
        if kept:
            flat = torch.cat([idx for _, idx in kept]) if len(kept) > 1 else kept[0][1]
            images = self.augmented(self.images_of(flat), max(len(idx) for _, idx in kept), TrainDraw.cat(draws))
            labels = self.labels_of(flat)
            sizes = [len(idx) for _, idx in kept]
            steps = iter(zip(images.split(sizes), labels.split(sizes)))
        for batch in batches:
            if batch is not None:
                self.drawn.extend(batch[0].tolist())
                x, y = next(steps)
                self.model.train()
                self.step_on(x, y)
            self.update_counter += 1
            if self.update_counter % self.params.imp_update_period == 0:
                self.update_importance()

    @torch.no_grad()
    def memory_losses(self) -> Tensor:
        """Per-slot cross-entropy of the whole memory, clean images, eval mode (batches of 512).
        Once the memory is full its chunks keep their shapes: each chunk's pass (`chunk_losses`)
        is replayed as a CUDA graph where the steps are (graphs.CapturedCall), and on CPU counted
        as a graph's body; the one read of the losses stays outside (the declared sync)."""
        self.model.eval()
        out = []
        full = self.online_memory.full
        for chunk in self.memory.indices.split(512):
            raw, y = self.images_of(chunk), self.labels_of(chunk)
            ledger_of(self).add("forward", raw.shape)  # grows with the memory: each size measured
            if not full:  # the memory still fills: a new shape every pass
                losses = self.chunk_losses(raw, y)
            elif self.stepper.graphed(len(raw), tuple(raw.shape[1:])):
                losses = self.importance_pass(raw, y)(raw, y)
            else:
                with graphable():  # what the graph replays on a GPU (counted apart by an active step_audit)
                    losses = self.chunk_losses(raw, y)
            out.append(losses.double().cpu())
        self.cost += len(self.memory)
        return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)

    def chunk_losses(self, raw: Tensor, y: Tensor) -> Tensor:
        """Device work only (a CUDA graph's body): the float32 cross-entropy of each of the uint8
        images `raw` (normalised here) under the model as it is (eval mode, no grad)."""
        x = self.accel.prepare(self.setup.augmenter.test(raw))
        return nnf.cross_entropy(self.mask_unseen(self.model(x)).float(), y, reduction="none")

    def importance_pass(self, raw: Tensor, y: Tensor) -> CapturedCall:
        """The importance pass's graph for a chunk of this size, made anew with a new model,
        optimiser or seen mask (and kept per `all_seen`: the unseen-class mask is then skipped)."""
        key = (len(raw), self.all_seen)
        cached = self.importance_graphs.get(key)
        if cached is None or not made_for(cached, self):
            if cached is not None:
                self.importance_graphs.clear()  # all made for the replaced model, optimiser or mask
            cached = self.importance_graphs[key] = CapturedCall(
                self.chunk_losses,
                (raw, y),
                self.model,
                self.optimizer,
                self.seen,
                f"CLIB's importance pass ({len(raw)} samples)",
                self.report.log,
            )
        return cached

    def update_importance(self) -> None:
        if len(self.memory) == 0:
            return
        loss = self.memory_losses()
        prev = self.loss
        if len(prev):
            keep = torch.ones(len(loss), dtype=torch.bool)
            gone = [p for p in self.replaced_since_update if p < len(loss)]
            keep[gone] = False
            delta = _mean((loss[: len(prev)] - prev)[keep[: len(prev)]])
        else:
            delta = 0.0
        if self.drawn:  # (a slot drawn twice counts twice in the mean and |B|, once in the update)
            b = torch.tensor(self.drawn, dtype=torch.long)
            difference = delta - float(self.importance[b].mean()) / len(b)
            unique = b.unique()
            self.importance[unique] = self.importance[unique] - EMA_STEP * difference
        self.drawn = []
        self.replaced_since_update = []
        self.loss = loss

    # ------------------------------------------------------------------ the adaptive learning rate

    def _set_lr(self, lr: float) -> None:
        self.current_lr = lr

    def adapt_lr(self) -> None:
        period = self.params.imp_update_period
        if self.update_counter % period:
            return
        self.ticks += 1
        if self.ticks % self.params.lr_period:
            return
        keep = torch.ones(len(self.loss), dtype=torch.bool)
        keep[[p for p in self.replaced_since_switch if p < len(self.loss)]] = False
        records = self.high_records if self.lr_is_high else self.low_records
        if self.prev_loss is not None and self.ticks > WARMUP_TICKS:
            n = len(self.prev_loss)
            records.append(_mean((self.prev_loss - self.loss[:n])[keep[:n]]))
            if len(records) > self.params.lr_length:
                del records[0]
        self.prev_loss = self.loss.clone()
        self.lr_is_high = not self.lr_is_high
        self._set_lr(self.high_lr if self.lr_is_high else self.low_lr)
        self.replaced_since_switch = []
        length = self.params.lr_length
        if len(self.high_records) == len(self.low_records) >= length:
            p = welch_greater(self.low_records, self.high_records)
            if p < SIGNIFICANCE or p > 1 - SIGNIFICANCE:
                if p < SIGNIFICANCE:  # the low lr decreases the loss more: both go down
                    self.high_lr, self.low_lr = self.low_lr, self.low_lr * self.params.lr_step
                else:  # the high lr does better: both go up
                    self.low_lr, self.high_lr = self.high_lr, self.high_lr / self.params.lr_step
                self.high_records, self.low_records = [], []
                self.lr_is_high = not self.lr_is_high
                self._set_lr(self.high_lr if self.lr_is_high else self.low_lr)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.task_free:
            state["clib"] = {
                "importance": self.importance,
                "loss": self.loss,
                "drawn": list(self.drawn),
                "replaced_since_update": list(self.replaced_since_update),
                "replaced_since_switch": list(self.replaced_since_switch),
                "update_counter": self.update_counter,
                "ticks": self.ticks,
                "prev_loss": self.prev_loss,
                "lr_is_high": self.lr_is_high,
                "high_lr": self.high_lr,
                "low_lr": self.low_lr,
                "high_records": list(self.high_records),
                "low_records": list(self.low_records),
                "current_lr": self.current_lr,
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        saved = state.get("clib")
        if saved is not None:
            for key, value in saved.items():
                setattr(self, key, list(value) if isinstance(value, list) else value)


def welch_greater(a: list[float], b: list[float]) -> float:
    """p-value of Welch's one-sided t-test that mean(a) > mean(b) (scipy's ttest_ind)."""
    from scipy.stats import ttest_ind

    result = ttest_ind(a, b, equal_var=False, alternative="greater")
    p = float(result.pvalue)
    return 0.5 if p != p else p  # identical constant records give NaN: no evidence either way
