"""BiC, Large Scale Incremental Learning (Wu et al., CVPR 2019), and BiC* (no distillation).

What differs from experience replay:
- held-out validation: `bic_val_fraction` of the memory budget (10%) is a class-balanced
  validation set, never trained on. A task's share is set aside from its stream as the stream
  arrives; the training memory gets the remaining K - V slots (herding exemplars, as BiC);
- stage 1 (the usual schedule): loss = lam * L_d + (1 - lam) * L_c with lam = n_old / n_seen,
  L_c the cross-entropy over seen classes and L_d the distillation over the old classes'
  logits at temperature T = `bic_temperature` (2), against the previous model (with its bias
  correction) on the same input. BiC* (`bic_star`, the RM paper's ImageNet row) drops L_d;
- stage 2: the network frozen, two scalars (alpha, beta) correct the logits of the task's new
  classes, o -> alpha * o + beta, fitted by cross-entropy on the validation set as in BiC's
  code: SGD (the run's lr, momentum 0.9), `bic_bias_epochs` (200) epochs of minibatches, an L2
  term 0.1 * beta^2 / 2. Corrections of earlier tasks stay fixed on their classes;
- inference uses the corrected logits (the RM authors' blurry runs train alpha, beta but their
  forward pass applies another, untrained layer: the correction is never used).
"New" and "old" classes in blurry streams follow `new_classes` (see incremental.py).

On the follow-up's task-free streams (its bic.py, PROTOCOL §9.5), BiC is the follow-up's ER
(TaskFree's batches: batch/2 stream + batch/2 memory, `online_iter` updates per sample,
reservoir memory) with:
- a validation set of V = round(`bic_val_fraction` x (K - batch/2)) samples, the memory keeping
  K - batch/2 - V. While only one class is seen it may fill V; from the n-th class on each class
  may hold V // n (every class's share randomly cut down when a class arrives). A streamed
  sample whose class is under its share goes to validation until the set is full and is never
  trained on nor stored (it still adds `online_iter` to the update budget, as theirs);
- from the second task on, loss = CE (with CutMix) + distillation at T = `bic_temperature` (no
  n_old/n_seen weighting) on the old classes' logits, against a snapshot of the model taken at
  every new class (before its head row exists) and at every task end, its logits passed
  through the previous task's bias layer; gradients clipped to norm 10 (`bic_star`: no
  distillation). The snapshot runs in eval mode (theirs keeps whichever mode the model was in:
  mostly train mode, eval mode right after an evaluation);
- one bias layer (alpha, beta) per task, on the classes first seen in that task. Before every
  evaluation (anytime and task end) the current task's layer is fitted afresh from (1, 0):
  `bic_anytime_passes` (256) passes of Adam (lr 1e-3) over the held-out set's logits (eval mode,
  clean images, computed once, shuffled once into batches of 100) — only when the validation set
  is full, from the second task on, and when the task brought classes; evaluation corrects the
  current task's classes only.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .. import memory as M
from .base import Method, Task, mixed_cross_entropy
from .bic_params import BiCParams
from .incremental import NewOldClasses, frozen_copy
from .taskfree import TaskFree

BETA_L2 = 0.1  # BiC's reference code penalises beta (its "gamma") by 0.1 * beta^2 / 2
ANYTIME_BIAS_LR = 1e-3  # the follow-up's Adam for the bias layer
ANYTIME_BIAS_BATCH = 100
ANYTIME_CLIP_NORM = 10.0


class BiC(TaskFree, NewOldClasses[BiCParams], Method[BiCParams]):
    name = "bic"
    kept_state: tuple[str, ...] = ("previous", "alpha", "beta")  # old model and its correction (memory bytes)
    default_memory_policy = "prototype"
    distill: bool = True
    # captured as a CUDA graph (graphs.MethodStep), under both protocols: CutMix drawn and the old
    # classes' indices read before the step (`step_key`); the bias layers, the previous model and
    # the teacher (snapshotted in place) are the graph's key, with the host's branch decisions
    capturable_step = True

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.val_capacity = max(1, round(self.params.bic_val_fraction * self.cfg.memory_size))
        self.memory = M.Memory(self.cfg.memory_size - self.val_capacity)
        self.val_indices = torch.empty(0, dtype=torch.long)
        self.val_labels = torch.empty(0, dtype=torch.long)
        # the bias correction layer, per class: logit_c -> alpha_c * logit_c + beta_c
        self.alpha = torch.ones(self.n_classes, device=self.device)
        self.beta = torch.zeros(self.n_classes, device=self.device)
        self.new_classes = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        self.old_classes = torch.zeros_like(self.new_classes)
        self.previous: tuple[torch.nn.Module, Tensor, Tensor] | None = None  # old model and its correction
        self.bias_history: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ the bias layer

    @staticmethod
    def correct(logits: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
        return logits * alpha + beta

    def logits(self, x: Tensor) -> Tensor:
        return self.mask_unseen(self.correct(self.model(x), self.alpha, self.beta))

    # ------------------------------------------------------------------ the schedule

    def before_task(self, task: Task) -> None:
        super().before_task(task)  # new / old classes and the frozen previous model
        self.previous = (
            None if self.previous_model is None else (self.previous_model, self.alpha.clone(), self.beta.clone())
        )
        # stage 1 trains the new classes uncorrected; their (alpha, beta) is fitted in stage 2
        self.alpha = torch.where(self.new_classes, torch.ones_like(self.alpha), self.alpha)
        self.beta = torch.where(self.new_classes, torch.zeros_like(self.beta), self.beta)
        self.old_index()  # read once here, not in the task's first step

    def learn_task(self, task: Task) -> None:
        held_out = self.hold_out(task)
        training = Task(task.index, task.stream[~torch.isin(task.stream, held_out)], task.n_tasks)
        super().learn_task(training)

    def after_task(self, task: Task) -> None:
        fit: dict[str, Any] = {"task": task.index, "classes": self.new_classes.nonzero().flatten().tolist()}
        if self.previous is not None and bool(self.new_classes.any()) and len(self.val_indices):
            fit.update(self.fit_bias(task))
        else:
            fit["note"] = "not fitted: no old classes or no new classes"
        self.bias_history.append(fit)
        held = torch.bincount(self.val_labels, minlength=self.n_classes).tolist()
        self.report.log(f"task {task.index + 1}: validation set {held}; bias correction {fit}")

    def hold_out(self, task: Task) -> Tensor:
        """Refill the class-balanced validation set from the old one and this task's stream;
        returns the stream samples it took (they are never trained on)."""
        candidates = torch.cat([self.val_indices, task.stream])
        labels = self.labels_of(candidates).cpu()
        chosen = M.class_balanced_select(candidates, labels, self.val_capacity, self.seen_classes, self.gen)
        self.val_indices, self.val_labels = chosen, self.labels_of(chosen).cpu()
        return chosen[torch.isin(chosen, task.stream)]

    # ------------------------------------------------------------------ stage 1

    def step_key(self, x: Tensor, y: Tensor) -> tuple[Any, ...]:
        self.draw_step_mix(x)
        if self.task_free:
            if not self.distill or self.task_index == 0 or self.teacher is None or self.teacher_classes == 0:
                return (False,)
            return (True, self.teacher, self.teacher_classes, *self.teacher_layer())
        if not self.distill or self.previous is None:
            return (self.alpha, self.beta)
        return (self.alpha, self.beta, *self.previous, self.old_index())

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        if self.task_free:
            return self.anytime_step_loss(x, y)
        mixed = self.step_cutmix(x, y)
        if mixed is not None:
            x, y_a, y_b, lam_mix, lam_rest = mixed
        logits = self.correct(self.model(x), self.alpha, self.beta)
        masked = self.mask_unseen(logits)
        if mixed is None:
            classification = nnf.cross_entropy(masked, y)
        else:
            classification = mixed_cross_entropy(masked, y_a, y_b, lam_mix, lam_rest)
        if not self.distill or self.previous is None:
            return classification
        old_model, old_alpha, old_beta = self.previous
        old = self.old_index()
        with torch.no_grad():
            old_logits = self.correct(old_model(x), old_alpha, old_beta).index_select(1, old)
        distillation = self.distillation(old_logits, logits.index_select(1, old))
        lam = len(old) / self.n_seen
        return lam * distillation + (1 - lam) * classification

    def old_index(self) -> Tensor:
        """The old classes as indices (what `[:, old_classes]` selects, without its host sync),
        read from the device once per value of `old_classes` (a task's start), not per step."""
        old = self.old_classes
        cached = getattr(self, "_old_index", None)
        if cached is None or cached[0] is not old or cached[1] != old._version:
            cached = self._old_index = (old, old._version, old.nonzero().flatten())
        return cached[2]

    def anytime_step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        """Task-free: CE (CutMix) on the uncorrected logits, plus (from the second task) the
        distillation against the latest snapshot, unweighted, as the follow-up's bic.py."""
        mixed = self.step_cutmix(x, y)
        if mixed is not None:
            x, y_a, y_b, lam_mix, lam_rest = mixed
        logits = self.model(x)
        masked = self.mask_unseen(logits)
        if mixed is None:
            loss = nnf.cross_entropy(masked, y)
        else:
            loss = mixed_cross_entropy(masked, y_a, y_b, lam_mix, lam_rest)
        if not self.distill or self.task_index == 0 or self.teacher is None or self.teacher_classes == 0:
            return loss
        n_old = self.teacher_classes
        with torch.no_grad():
            old_logits = self.correct(self.teacher(x), *self.teacher_layer())[:, :n_old]
        return loss + self.distillation(old_logits, logits[:, :n_old])

    def distillation(self, old_logits: Tensor, new_logits: Tensor) -> Tensor:
        """Cross-entropy of the new logits' softened distribution against the old ones' (T)."""
        temperature = self.params.bic_temperature
        soft_targets = torch.softmax(old_logits / temperature, dim=1)
        return -(soft_targets * torch.log_softmax(new_logits / temperature, dim=1)).sum(1).mean()

    # ------------------------------------------------------------------ stage 2

    def fit_bias(self, task: Task) -> dict[str, Any]:
        """Fit this task's (alpha, beta) on the held-out set with the network frozen (its logits
        are computed once, on clean images)."""
        epochs = self.params.bic_bias_epochs
        self.report.phase(task.index, "bias correction", len(self.val_indices) * max(epochs, 1))
        self.model.eval()
        with torch.no_grad():
            test = self.setup.augmenter.test
            logits = torch.cat([self.model(test(self.images_of(part))) for part in self.val_indices.split(4096)])
        labels = self.val_labels.to(logits.device)
        pair = torch.tensor([1.0, 0.0], device=self.device, requires_grad=True)
        optimizer = torch.optim.SGD([pair], lr=self.cfg.lr, momentum=0.9)

        def corrected(rows: Tensor) -> Tensor:
            alpha = torch.where(self.new_classes, pair[0], self.alpha)
            beta = torch.where(self.new_classes, pair[1], self.beta)
            return self.mask_unseen(self.correct(logits[rows], alpha, beta))

        everything = torch.arange(len(labels), device=logits.device)
        with torch.no_grad():
            before = float(nnf.cross_entropy(corrected(everything), labels))
        for _ in range(epochs):
            order = torch.randperm(len(labels), generator=self.gen).to(logits.device)
            for rows in order.split(self.cfg.batch_size):
                loss = nnf.cross_entropy(corrected(rows), labels[rows]) + BETA_L2 * pair[1] ** 2 / 2
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            self.report.advance(len(labels))
        with torch.no_grad():
            after = float(nnf.cross_entropy(corrected(everything), labels))
        alpha, beta = (float(v) for v in pair.detach())
        self.alpha = torch.where(self.new_classes, torch.full_like(self.alpha, alpha), self.alpha)
        self.beta = torch.where(self.new_classes, torch.full_like(self.beta, beta), self.beta)
        return {
            "alpha": round(alpha, 4),
            "beta": round(beta, 4),
            "val_loss_before": round(before, 4),
            "val_loss_after": round(after, 4),
        }

    # ------------------------------------------------------------------ task-free streams

    @property
    def online_val_capacity(self) -> int:
        """V: the follow-up holds out a share of the memory its ER would have (K - batch/2)."""
        return max(1, round(self.params.bic_val_fraction * super().online_capacity))

    @property
    def online_capacity(self) -> int:
        return max(1, super().online_capacity - self.online_val_capacity)

    def make_optimizer(self) -> torch.optim.Optimizer:
        optimizer = super().make_optimizer()
        if self.task_free:  # the follow-up clips every BiC step's gradient to norm 10
            optimizer.register_step_pre_hook(self.clip_gradients)
        return optimizer

    def clip_gradients(self, *_: Any) -> None:
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), ANYTIME_CLIP_NORM)

    def online_start(self) -> None:
        super().online_start()
        self.held_out: dict[int, list[int]] = {}  # label -> held-out stream indices, in arrival order
        self.held_out_share = self.online_val_capacity  # per class: V while one class is seen, then V // n
        self.held_out_full = False
        self.task_index = 0
        self.task_classes: list[list[int]] = [[]]  # per task: the labels first seen in it (its bias layer's)
        self.task_layers: list[tuple[float, float]] = [(1.0, 0.0)]  # per task: its bias layer (alpha, beta)
        self.teacher: torch.nn.Module | None = None
        self.teacher_classes = 0  # the snapshot's classes: labels 0 .. teacher_classes - 1
        self.anytime_fits: list[dict[str, Any]] = []

    def online_task_start(self, task: Task) -> None:
        self.task_index = task.index
        while len(self.task_classes) <= task.index:
            self.task_classes.append([])
            self.task_layers.append((1.0, 0.0))
        self.use_layer(task.index)

    def online_new_class(self, label: int) -> None:
        if self.distill:
            self.snapshot()  # before the class gets its head row: the teacher knows the older classes
        super().online_new_class(label)
        self.task_classes[self.task_index].append(label)
        n_seen = self.n_seen
        if n_seen > 1:
            self.held_out_share = self.online_val_capacity // n_seen
            for y, kept in self.held_out.items():
                if len(kept) > self.held_out_share:
                    chosen = sorted(self.sample_rng.sample(range(len(kept)), self.held_out_share))
                    self.held_out[y] = [kept[i] for i in chosen]
            self.held_out_full = False

    def online_observe(self, index: int, label: int) -> None:
        if self.hold_out_sample(index, label):
            self.earn_updates()  # the follow-up counts it before deciding
            return
        super().online_observe(index, label)

    def hold_out_sample(self, index: int, label: int) -> bool:
        """True when the sample goes to the validation set (then it is never trained on)."""
        if self.held_out_full:
            return False
        kept = self.held_out.setdefault(label, [])
        if len(kept) >= self.held_out_share:
            return False
        kept.append(index)
        if sum(len(v) for v in self.held_out.values()) == self.held_out_share * self.n_seen:
            self.held_out_full = True
        return True

    def online_before_eval(self) -> None:
        self.fit_task_layer()

    def online_task_end(self, task: Task) -> None:
        if self.distill:
            self.snapshot()
        self.fit_task_layer()  # the task-end evaluation refits it too, as theirs
        n_seen, held = self.n_seen, sum(len(v) for v in self.held_out.values())
        fitted = self.anytime_fits[-1] if self.anytime_fits and self.anytime_fits[-1]["task"] == task.index else None
        layer = (
            f"alpha {fitted['alpha']}, beta {fitted['beta']}"
            if fitted
            else "not fitted ("
            + (
                "task 1"
                if task.index == 0
                else "no new class"
                if not self.task_classes[task.index]
                else "validation set not full"
            )
            + ")"
        )
        self.report.log(
            f"task {task.index + 1}: validation set {held} samples, up to {self.held_out_share} per "
            f"class of {n_seen}; bias layer of its {len(self.task_classes[task.index])} new classes: "
            f"{layer}"
        )

    def snapshot(self) -> None:
        if self.teacher is None:
            self.teacher = frozen_copy(self.model)
        else:  # in place: the same numbers as a fresh copy, and a captured step keeps its tensors
            self.teacher.load_state_dict(self.model.state_dict())
        self.teacher_classes = self.n_seen

    def teacher_layer(self) -> tuple[Tensor, Tensor]:
        """The previous task's layer as per-class vectors, built once per value of that layer
        (it is fixed while the current task runs), not at every step."""
        key = (self.task_index, self.task_layers[self.task_index - 1], tuple(self.task_classes[self.task_index - 1]))
        if getattr(self, "_teacher_layer", (None,))[0] != key:
            self._teacher_layer = (key, self.layer_vectors(self.task_index - 1, *self.task_layers[self.task_index - 1]))
        return self._teacher_layer[1]

    def use_layer(self, task: int) -> None:
        """Evaluation corrects the classes of `task` by its layer and nothing else."""
        alpha, beta = self.task_layers[task]
        self.alpha, self.beta = self.layer_vectors(task, alpha, beta)

    def task_class_mask(self, task: int) -> Tensor:
        classes = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        classes[torch.tensor(self.task_classes[task], dtype=torch.long, device=self.device)] = True
        return classes

    def layer_vectors(self, task: int, alpha: float, beta: float) -> tuple[Tensor, Tensor]:
        """Per-class (alpha, beta): task `task`'s layer on its classes, the identity elsewhere."""
        classes = self.task_class_mask(task)
        ones = torch.ones(self.n_classes, device=self.device)
        return torch.where(classes, alpha * ones, ones), torch.where(classes, beta * ones, 0 * ones)

    def held_out_indices(self) -> Tensor:
        return torch.tensor([i for y in sorted(self.held_out) for i in self.held_out[y]], dtype=torch.long)

    def fit_task_layer(self) -> None:
        """The current task's bias layer, fitted afresh on the held-out set (the network frozen)."""
        t = self.task_index
        self.task_layers[t] = (1.0, 0.0)
        passes = self.params.bic_anytime_passes
        if self.held_out_full and t > 0 and self.task_classes[t] and passes > 0:
            indices = self.held_out_indices()
            self.model.eval()
            with torch.no_grad():
                test = self.setup.augmenter.test
                logits = torch.cat([self.model(test(self.images_of(part))) for part in indices.split(4096)])
            labels = self.labels_of(indices).to(logits.device)
            order = torch.randperm(len(indices), generator=self.gen).to(logits.device)
            batches = [(logits[rows], labels[rows]) for rows in order.split(ANYTIME_BIAS_BATCH)]
            pair = torch.tensor([1.0, 0.0], device=logits.device, requires_grad=True)
            optimizer = torch.optim.Adam([pair], lr=ANYTIME_BIAS_LR)
            classes = self.task_class_mask(t).to(logits.device)
            for _ in range(passes):
                for batch_logits, batch_labels in batches:
                    corrected = torch.where(classes, batch_logits * pair[0] + pair[1], batch_logits)
                    loss = nnf.cross_entropy(self.mask_unseen(corrected), batch_labels)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
            alpha, beta = (float(v) for v in pair.detach().cpu())
            self.task_layers[t] = (alpha, beta)
            self.anytime_fits.append(
                {"task": t, "alpha": round(alpha, 4), "beta": round(beta, 4), "held_out": len(indices)}
            )
        self.use_layer(t)

    def memory_report(self, task: Task, info: dict[str, Any] | None = None) -> None:
        if not self.task_free:
            return super().memory_report(task, info)
        held = torch.bincount(self.labels_of(self.held_out_indices()).cpu(), minlength=self.n_classes)
        super().memory_report(
            task, {"validation_per_class": held.tolist(), "bias_layers": list(self.task_layers), **(info or {})}
        )

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.task_free and hasattr(self, "held_out"):
            # the teacher is the model itself at a task end, where checkpoints are taken
            state["bic_online"] = {
                "held_out": {y: list(v) for y, v in self.held_out.items()},
                "share": self.held_out_share,
                "full": self.held_out_full,
                "task_index": self.task_index,
                "task_classes": [list(c) for c in self.task_classes],
                "task_layers": list(self.task_layers),
                "teacher_classes": self.teacher_classes if self.teacher is not None else None,
                "anytime_fits": list(self.anytime_fits),
            }
            return state
        state["bic"] = {
            "val_indices": self.val_indices,
            "val_labels": self.val_labels,
            "alpha": self.alpha.cpu(),
            "beta": self.beta.cpu(),
            "bias_history": self.bias_history,
        }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        online = state.get("bic_online")
        if online is not None:
            self.held_out = {int(y): list(v) for y, v in online["held_out"].items()}
            self.held_out_share, self.held_out_full = int(online["share"]), bool(online["full"])
            self.task_index = int(online["task_index"])
            self.task_classes = [list(c) for c in online["task_classes"]]
            self.task_layers = [tuple(p) for p in online["task_layers"]]
            self.anytime_fits = list(online["anytime_fits"])
            if online["teacher_classes"] is not None:
                self.teacher = frozen_copy(self.model)
                self.teacher_classes = int(online["teacher_classes"])
            self.use_layer(self.task_index)
            return
        bic = state["bic"]
        self.val_indices, self.val_labels = bic["val_indices"], bic["val_labels"]
        self.alpha, self.beta = bic["alpha"].to(self.device), bic["beta"].to(self.device)
        self.bias_history = list(bic["bias_history"])


class BiCStar(BiC):
    """BiC* (RM paper, ImageNet row): BiC without the distillation loss."""

    name = "bic_star"
    distill = False
