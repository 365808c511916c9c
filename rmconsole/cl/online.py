"""The task-free protocol of the follow-up (Koh et al., ICLR 2022; PROTOCOL §9.2-9.3): the
i-Blurry / Si-Blurry stream fed to a method one sample at a time, with anytime evaluation.

    for every streamed sample, in order:
        a class never seen before -> method.online_new_class(label)      (labels by first appearance)
        method.online_observe(index, label)                              (its updates, its memory)
        every eval_period samples  -> method.online_before_eval(); test accuracy on the classes
                                      exposed so far (batched, on the device) -> one AnytimePoint
    at each task boundary: method.online_task_end(task) (the boundary hooks the follow-up's code
    gives its methods; ER and CLIB ignore them), the task-end evaluation (A_avg, A_last, F_last),
    a memory snapshot and a checkpoint (resume continues from the last boundary).

A_auc is the mean of the anytime accuracies (metrics_anytime.area_under_curve, the catalogue's rule). `compute_budget` (Ghunaim et al.,
CVPR 2023) turns the stream into a real-time one: the stream delivers one sample per tick, the
learner may spend `compute_budget` image passes per tick, and a sample that arrives while the
learner is still busy (its spent passes exceed budget x ticks) is never seen by it. Evaluation
then covers every class the *stream* has shown, so a learner is charged for what it missed.

Timing is recorded apart: training (everything the method does) and evaluation (the protocol's
test passes), so a run reports its training samples/s and the share evaluation costs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from . import compute, metrics, metrics_anytime, streams, streams_iblurry
from .data import Dataset
from .events import AnytimePoint, Reporter, TaskOutcome, TaskPlan
from .inference import evaluate, validation
from .learner import Task
from .methods import method_class
from .resume import announce, checkpoint_of, prepare, restore, validation_figures
from .settings import RunSettings
from .train import check_finite

ADVANCE_EVERY = 64  # samples between progress reports (a lock and an add: cheap, but per sample is waste)


class NotTaskFree(ValueError):
    """The run's method has no task-free hooks (config.py refuses this first; one line)."""


@dataclass
class OnlineProtocol:
    """A task-free stream: labels by first appearance, the tasks in arrival order, each task's
    own classes (disjoint + blurry majors) and where each class first appears."""

    class_order: list[int]  # dataset class of each label (= order of first appearance)
    train_labels: Tensor
    test_labels: Tensor
    groups: list[list[int]]
    tasks: list[Tensor]
    first: list[list[tuple[int, int]]]
    held_out: streams.HeldOut | None = None  # the validation split (val_fraction > 0), else None

    def plans(self, n_classes: int) -> list[TaskPlan]:
        return [
            TaskPlan(
                t,
                len(s),
                self.groups[t],
                streams.composition(self.train_labels, s, n_classes),
                streams.stream_hash(s),
                [(c, at) for c, at in self.first[t]],
            )
            for t, s in enumerate(self.tasks)
        ]


def build_online_protocol(cfg: RunSettings, data: Dataset) -> OnlineProtocol:
    labels = data.train.labels.cpu()
    # the validation share first, by its own generator; the split is made over what is left
    held = streams.hold_out(labels, cfg.val_fraction, cfg.seed)
    split = streams_iblurry.make_split(
        cfg.stream,
        labels if held.empty else labels[held.train],
        cfg.n_tasks,
        data.n_classes,
        cfg.disjoint_classes,
        cfg.blurry,
        cfg.seed,
        cfg.pool_order,
    )
    if not held.empty:
        split = streams_iblurry.BlurrySplit(
            held.restrict(split.tasks), split.disjoint, split.blurry, held.restrict(split.pooled)
        )
    order = streams_iblurry.first_appearance_order(labels, split.tasks, data.n_classes)
    train_labels = streams.remap_labels(labels, order)
    test_labels = (
        streams.remap_labels(data.test.labels.cpu(), order) if cfg.evaluate_test else torch.empty(0, dtype=torch.long)
    )  # evaluate_test=false: the test split untouched
    position = {c: i for i, c in enumerate(order)}
    groups = [sorted(position[c] for c in split.majors(t)) for t in range(len(split.tasks))]
    first = streams_iblurry.first_appearances(train_labels, split.tasks)
    return OnlineProtocol(order, train_labels, test_labels, groups, split.tasks, first, None if held.empty else held)


@dataclass
class Clock:
    """Where the stream is, and what the run has spent (checkpointed at task boundaries)."""

    arrivals: int = 0  # samples the stream has delivered
    observed: int = 0  # samples the learner received (arrivals - skipped)
    skipped: int = 0  # samples lost to the compute budget
    exposed: int = 0  # classes the stream has shown (evaluation scope)
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    wall_seconds: float = 0.0  # the tasks' whole time in the driver (training, evaluation, reports)
    evaluations: int = 0
    anytime_accuracies: list[float] = field(default_factory=list)  # this attempt's points, for A_auc

    def state(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Clock:
        """A checkpoint's clock; one written before the anytime accuracies were kept (it held their
        sum) resumes too, its A_auc in the loop's figures then over the points after the resume
        (the run's stored A_auc is the catalogue's, over every stored point)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in state.items() if k in names})


def run_online(
    cfg: RunSettings,
    data: Dataset,
    device: torch.device,
    reporter: Reporter | None = None,
    resume: dict[str, Any] | None = None,
) -> list[TaskOutcome]:
    """Stream `cfg`'s i-Blurry / Si-Blurry tasks through `cfg.method`, sample by sample, with
    anytime evaluation every `eval_period` samples and an evaluation at each task boundary."""
    from .methods.taskfree import TaskFree

    reporter = reporter or Reporter()
    torch.manual_seed(cfg.seed)
    protocol = build_online_protocol(cfg, data)
    prepared = prepare(cfg, data, protocol, device, reporter)
    data, train_labels, test_labels = prepared.data, prepared.train_labels, prepared.test_labels
    augmenter = prepared.augmenter
    method = method_class(cfg.method_spec)(prepared.setup)
    if not isinstance(method, TaskFree):
        raise NotTaskFree(f"method={cfg.method}: has no task-free version (stream={cfg.stream})")
    method.online_start()
    clock = Clock()
    start = 0
    if resume is not None:
        start = restore(resume, cfg, protocol, method, augmenter, device)
        clock = Clock.from_state(resume.get("online_clock", {}))
        compute.ledger_of(method).load(resume.get("compute"))
    credit = cfg.train_gflop_per_sample  # a FLOP credit per sample instead of online_iter (compute.Credit)
    reporter.log(
        f"compute on {device}: {method.accel.describe()}; task-free {cfg.stream}-"
        f"{cfg.disjoint_classes}-{cfg.blurry} (pool order {cfg.pool_order}), "
        + (
            f"train_gflop_per_sample={credit:g} (a FLOP credit)"
            if credit is not None
            else f"online_iter={cfg.online_iter:g}"
        )
        + f", eval_period={cfg.eval_period}"
        + (f", compute_budget={cfg.compute_budget:g}" if cfg.compute_budget else "")
    )
    plans = announce(cfg, protocol, data, augmenter, reporter)
    held = protocol.held_out
    labels_cpu = protocol.train_labels
    budget = cfg.compute_budget
    outcomes = []

    def anytime(task: Task) -> None:
        began = time.perf_counter()
        method.online_before_eval()
        # a diverged model would be scored at chance, silently, to the stream's end (train.Diverged)
        check_finite(method, task, f"at streamed sample {clock.arrivals}")
        trained = time.perf_counter()
        acc: float | None = None
        class_acc: list[float | None] | None = None
        if cfg.evaluate_test:  # false: a tuning trial, which never reads the test split
            acc, class_acc = evaluate(method, data, test_labels, list(range(clock.exposed)), augmenter)
            clock.anytime_accuracies.append(acc)
        val_acc = None
        if held is not None:  # the validation pass: a call of its own, on held-out train samples only
            val_acc = validation(
                method, data, held.validation, train_labels, list(range(clock.exposed)), augmenter
            ).accuracy
        seconds = time.perf_counter() - trained
        clock.train_seconds += trained - began
        clock.eval_seconds += seconds
        clock.evaluations += 1
        reporter.anytime_evaluated(
            AnytimePoint(
                task.index,
                clock.arrivals,
                acc,
                clock.exposed,
                class_acc[: clock.exposed] if cfg.anytime_class_accuracy and class_acc is not None else None,
                round(seconds, 4),
                val_acc,
                float(compute.ledger_of(method).flops(method.model, compute.TRAINING)),
            )
        )

    for t in range(start, len(protocol.tasks)):
        task_started = time.perf_counter()
        task = Task(t, protocol.tasks[t], len(protocol.tasks))
        reporter.phase(t, "stream", len(task.stream))
        began = time.perf_counter()
        method.online_task_start(task)
        indices = task.stream.tolist()
        labels = labels_cpu[task.stream].tolist()
        since_advance = 0
        for index, label in zip(indices, labels):
            clock.arrivals += 1
            if label >= clock.exposed:  # labels follow first appearance: a new class is the next label
                clock.exposed = label + 1
            if budget is not None and method.cost > budget * clock.arrivals:
                clock.skipped += 1
            else:
                feed(method, index, label)
                clock.observed += 1
            since_advance += 1
            if since_advance == ADVANCE_EVERY:
                reporter.advance(since_advance)
                since_advance = 0
            if clock.arrivals % cfg.eval_period == 0:
                clock.train_seconds += time.perf_counter() - began
                anytime(task)
                began = time.perf_counter()
        reporter.advance(since_advance)
        method.online_task_end(task)
        check_finite(method, task, "at the task's end")
        clock.train_seconds += time.perf_counter() - began
        evaluated = time.perf_counter()
        classes = list(range(clock.exposed))
        task_acc: float | None = None
        task_class_acc: list[float | None] | None = None
        if cfg.evaluate_test:  # false: validation only, the test split never read
            reporter.phase(t, "evaluation", int((test_labels < clock.exposed).sum()))
            task_acc, task_class_acc = evaluate(method, data, test_labels, classes, augmenter)
        val = validation_figures(method, prepared, protocol, classes)
        clock.eval_seconds += time.perf_counter() - evaluated
        method.memory_report(task)
        clock.wall_seconds += time.perf_counter() - task_started
        figures = compute.summary(method, clock.observed, clock.train_seconds + clock.eval_seconds)  # FLOPs, bytes
        extra = {"memory": dict(method.memory_info), "online": {**online_summary(clock, method), **figures}}
        outcome = TaskOutcome(
            t,
            task_acc,
            None if task_class_acc is None else metrics.task_accuracy_row(task_class_acc, protocol.groups),
            task_class_acc,
            classes,
            time.perf_counter() - task_started,
            extra=extra,
            **val,
        )
        checkpoint = checkpoint_of(t, cfg, method, augmenter, plans, protocol, device, online_clock=clock.state())
        reporter.task_finished(outcome, checkpoint)
        outcomes.append(outcome)
    return outcomes


def feed(method: Any, index: int, label: int) -> None:
    """What the driver does with a streamed sample the learner receives (benchmarks and tests
    call it too). Whether its class is new is the host's own record (`seen_host`): no sync."""
    if not method.seen_host[label]:
        method.online_new_class(label)
    method.online_observe(index, label)


def online_summary(clock: Clock, method: Any) -> dict[str, Any]:
    """The run's compute-aware numbers so far (stored with each task's result)."""
    return {
        "samples_seen": clock.arrivals,
        "samples_trained": clock.observed,
        "samples_skipped": clock.skipped,
        "train_seconds": round(clock.train_seconds, 3),
        "eval_seconds": round(clock.eval_seconds, 3),
        "wall_seconds": round(clock.wall_seconds, 3),
        "train_samples_per_s": round(clock.observed / clock.train_seconds, 1) if clock.train_seconds > 0 else None,
        "evaluations": clock.evaluations,
        "evaluations_per_s": round(clock.evaluations / clock.eval_seconds, 2) if clock.eval_seconds > 0 else None,
        "A_auc": metrics_anytime.area_under_curve(clock.anytime_accuracies),
        "optimiser_steps": method.online_steps,
        "image_passes": method.cost,
    }
