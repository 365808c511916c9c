"""The protocol driver: builds the stream, feeds it task by task to a method, evaluates.

Pure science: it reports through a `Reporter` and returns the results; the worker decides
what to store. Resuming passes the method state saved after `start_task - 1`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from . import compute, distributed, metrics, streams
from .data import Dataset
from .events import Reporter, TaskOutcome, TaskPlan
from .inference import evaluate, evaluation
from .methods import Task, method_class
from .online import run_online
from .protocols import is_task_free
from .resume import CheckpointMismatch, announce, checkpoint_of, make_augmenter, prepare, restore, validation_figures  # noqa: F401  (re-exported: the loop's helpers)
from .settings import RunSettings
from .train import check_finite


@dataclass
class Protocol:
    """The stream of a run: class order, remapped labels, tasks and evaluation scope."""

    class_order: list[int]
    train_labels: Tensor
    test_labels: Tensor
    groups: list[list[int]]
    tasks: list[Tensor]
    scope: streams.EvalScope
    held_out: streams.HeldOut | None = None  # the validation split (val_fraction > 0), else None

    def plans(self, n_classes: int) -> list[TaskPlan]:
        return [
            TaskPlan(
                t, len(s), self.groups[t], streams.composition(self.train_labels, s, n_classes), streams.stream_hash(s)
            )
            for t, s in enumerate(self.tasks)
        ]


def build_protocol(cfg: RunSettings, data: Dataset) -> Protocol:
    order = streams.class_order(data.name, data.n_classes, cfg.seed, cfg.class_order)
    train_labels = streams.remap_labels(data.train.labels.cpu(), order)
    # evaluate_test=false: the test split is not touched at all, not even its labels
    test_labels = (
        streams.remap_labels(data.test.labels.cpu(), order) if cfg.evaluate_test else torch.empty(0, dtype=torch.long)
    )
    single = method_class(cfg.method_spec).single_task
    n_tasks = 1 if single else cfg.n_tasks
    groups = streams.task_classes(data.n_classes, n_tasks)
    # the validation share is held out first, by its own generator; the stream is built over
    # what is left exactly as over the whole set (with nothing held out: the whole set itself)
    held = streams.hold_out(data.train.labels, cfg.val_fraction, cfg.seed)
    tasks = streams.make_tasks(
        train_labels if held.empty else train_labels[held.train], n_tasks, data.n_classes, cfg.blurry, cfg.seed
    )
    return Protocol(
        order,
        train_labels,
        test_labels,
        groups,
        held.restrict(tasks),
        streams.EvalScope(blurry=cfg.blurry > 0 or single, groups=groups),
        None if held.empty else held,
    )


def run_protocol(
    cfg: RunSettings,
    data: Dataset,
    device: torch.device,
    reporter: Reporter | None = None,
    resume: dict[str, Any] | None = None,
) -> list[TaskOutcome]:
    """Train `cfg.method` on the stream of `cfg` and evaluate after every task.

    With `resume` (a checkpoint from `Reporter.task_finished`), training continues at the
    task after the checkpoint's and only the remaining outcomes are returned.
    """
    if is_task_free(cfg):  # the follow-up's task-free protocol: its own driver
        return run_online(cfg, data, device, reporter, resume)
    reporter = reporter or Reporter()
    torch.manual_seed(cfg.seed)
    protocol = build_protocol(cfg, data)
    prepared = prepare(cfg, data, protocol, device, reporter)
    data, test_labels, augmenter = prepared.data, prepared.test_labels, prepared.augmenter
    dist = distributed.context()
    if dist:  # the resume checkpoint is rank 0's to read; every rank continues from it
        resume = dist.broadcast_object(resume)
    method = method_class(cfg.method_spec)(prepared.setup)
    start = 0
    spent = {"samples": 0, "seconds": 0.0}  # stream samples trained on and task seconds, for the compute figures
    if resume is not None:
        start = restore(resume, cfg, protocol, method, augmenter, device)
        compute.ledger_of(method).load(resume.get("compute"))
        spent.update(resume.get("compute_spent") or {})
    if dist:
        dist.sync_module(method.model)
        distributed.restore_rank_state(augmenter, resume, cfg.seed, dist)
    reporter.log(
        (f"rank {dist.rank}/{dist.world}, collectives on {dist.device}; " if dist else "")
        + f"compute on {device}: {method.accel.describe()}"
        + (", cuda_graphs=True" if method.uses_graphs else "")
    )
    plans = announce(cfg, protocol, data, augmenter, reporter)
    held = protocol.held_out
    outcomes = []
    for t in range(start, len(protocol.tasks)):
        started = time.perf_counter()
        task = Task(t, protocol.tasks[t], len(protocol.tasks))
        classes = protocol.scope.classes_after(t)
        if cfg.eval_every_epoch and cfg.evaluate_test:  # config.py refuses the pair; never a test read
            method.epoch_eval = lambda: evaluate(method, data, test_labels, classes, augmenter)[0]  # noqa: B023 - called during this task only
        method.before_task(task)
        method.learn_task(task)
        method.after_task(task)
        check_finite(method, task, "after the task")  # whatever trained outside `fit` (BiC's bias layer...)
        if dist:  # whatever a method trained outside `fit` (BiC's bias layer...) is rank 0's everywhere
            dist.sync_module(method.model)
            dist.agree(
                f"model after task {t + 1}",
                torch.tensor(list(bytes.fromhex(distributed.module_hash(method.model))), dtype=torch.uint8),
            )
        spent["samples"] += len(task.stream)
        # the outcome's figures measured after the task (evaluate_test=false, a tuning trial: no
        # test figure, the test split never read; validation only)
        figures: dict[str, Any] = {"accuracy": None, "accuracy_row": None, "class_accuracy": None}
        if cfg.evaluate_test:
            reporter.phase(t, "evaluation", int(torch.isin(test_labels, torch.tensor(classes, device=device)).sum()))
            result = evaluation(method, data, test_labels, classes, augmenter, topk=cfg.topk)
            figures.update(
                accuracy=result.accuracy,
                accuracy_row=metrics.task_accuracy_row(result.class_accuracy, protocol.groups),
                class_accuracy=result.class_accuracy,
                best_epoch_accuracy=method.best_epoch_accuracy,
            )
            if result.topk_class_accuracy is not None:
                figures.update(
                    topk=result.topk,
                    topk_accuracy=result.topk_accuracy,
                    topk_accuracy_row=metrics.task_accuracy_row(result.topk_class_accuracy, protocol.groups),
                )
        seconds = time.perf_counter() - started  # (the validation pass is not the task's time)
        if held is not None:  # the validation pass: a call of its own, on held-out train samples only
            reporter.phase(
                t, "validation", int(torch.isin(protocol.train_labels[held.validation], torch.tensor(classes)).sum())
            )
            figures.update(validation_figures(method, prepared, protocol, classes))
        spent["seconds"] += time.perf_counter() - started
        online = compute.summary(method, int(spent["samples"]), float(spent["seconds"]), dist.world if dist else 1)
        # the run's compute so far (the catalogue's) beside the memory's state
        extra = {"memory": dict(method.memory_info), "online": online}
        outcome = TaskOutcome(t, eval_classes=classes, seconds=seconds, extra=extra, **figures)
        checkpoint = checkpoint_of(t, cfg, method, augmenter, plans, protocol, device, compute_spent=dict(spent))
        if dist:  # every rank's own draws, so a resumed multi-process run continues exactly
            checkpoint["rank_states"] = distributed.rank_states(augmenter, dist)
        reporter.task_finished(outcome, checkpoint)
        outcomes.append(outcome)
    return outcomes
