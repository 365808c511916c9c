"""Inside a task: per-epoch loss / lr / samples/s from the engine, and the memory update's
progress in candidates."""

from __future__ import annotations

import math

import torch

from rmconsole.cl.data import load_digits
from rmconsole.cl.events import Reporter
from rmconsole.cl.loop import run_protocol
from rmconsole.cl.schedule import epoch_lr
from rmconsole.cl.uncertainty import vote_uncertainty
from rmconsole.config import load_config


class EpochRecorder(Reporter):
    def __init__(self) -> None:
        self.epochs, self.phases, self.advances = [], [], []
        self.current = None

    def phase(self, task, name, total):
        self.current = name
        self.phases.append((task, name, total))
        self.advances.append([])

    def advance(self, n):
        self.advances[-1].append(n)

    def epoch_finished(self, stats):
        self.epochs.append(stats)


def test_one_epoch_row_per_epoch_with_loss_lr_and_speed() -> None:
    _, cfg = load_config(None, {"epochs": 3, "n_tasks": 2, "eval_every_epoch": True})
    rec = EpochRecorder()
    run_protocol(cfg, load_digits(), torch.device("cpu"), rec)
    # online: per task one stream pass, then E memory epochs
    assert [(e.task, e.phase, e.epoch) for e in rec.epochs] == [
        (t, phase, e) for t in range(2) for phase, n in (("stream", 1), ("memory", 3)) for e in range(n)
    ]
    memory = [e for e in rec.epochs if e.phase == "memory"]
    assert [e.lr for e in memory[:3]] == [epoch_lr(e, cfg.lr, cfg.schedule) for e in range(3)]
    assert all(e.samples == 200 and e.epochs == 3 for e in memory)  # K samples per memory epoch
    assert all(e.loss is not None and 0 < e.loss < 10 and math.isfinite(e.loss) for e in rec.epochs)
    assert all(e.samples_per_s and e.samples_per_s > 0 for e in rec.epochs)
    # asked for: test accuracy after every memory epoch (never after the stream pass)
    assert all(e.test_accuracy is not None and 0 <= e.test_accuracy <= 100 for e in memory)
    assert all(e.test_accuracy is None for e in rec.epochs if e.phase == "stream")


def test_the_loss_is_the_mean_of_the_steps_losses() -> None:
    """A method whose loss is known: the reported epoch loss is the sample-weighted mean of the
    steps' losses (not the last step's, not the unweighted mean of batches)."""
    from rmconsole.cl import train
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup, Task, method_class

    _, cfg = load_config(None, {"epochs": 1, "augment": "none", "batch_size": 16})
    data = load_digits()
    proto = build_protocol(cfg, data)
    seen: list[tuple[float, int]] = []
    finetune = method_class("finetune")

    class Recording(finetune):  # type: ignore[misc, valid-type]
        def step_loss(self, x, y):  # (an overridden loss: the engine's autograd path)
            loss = super().step_loss(x, y)
            seen.append((float(loss.detach()), len(x)))
            return loss

    def epoch_of(cls) -> object:
        torch.manual_seed(0)
        rec = EpochRecorder()
        setup = Setup(
            cfg,
            data,
            proto.train_labels,
            proto.test_labels,
            proto.groups,
            torch.device("cpu"),
            make_augmenter(cfg, data, torch.device("cpu")),
            rec,
        )
        method = cls(setup)
        task = Task(0, proto.tasks[0][:40], 1)  # 40 samples: batches of 16, 16 and 8
        method.before_task(task)
        train.fit(method, 1, lambda e: list(task.stream.split(16)), "offline", task)
        (stats,) = rec.epochs
        return stats

    stats = epoch_of(Recording)
    assert [n for _, n in seen] == [16, 16, 8] and stats.samples == 40
    assert abs(stats.loss - sum(v * n for v, n in seen) / 40) < 1e-5
    plain = epoch_of(finetune)  # the default step: an MLP's step without autograd (mlp_step.py)
    assert plain.samples == 40 and abs(plain.loss - stats.loss) < 1e-5


def test_memory_update_reports_progress_in_candidates() -> None:
    _, cfg = load_config(None, {"epochs": 1, "n_tasks": 2})
    rec = EpochRecorder()
    import rmconsole.cl.inference as inference

    original = inference.inference_batch
    inference.inference_batch = lambda *a, **k: 12 * 50  # 50 candidates per scoring chunk
    try:
        run_protocol(cfg, load_digits(), torch.device("cpu"), rec)
    finally:
        inference.inference_batch = original
    updates = [(p, a) for p, a in zip(rec.phases, rec.advances) if p[1] == "memory update"]
    (_, first), (second_phase, second) = updates
    total = second_phase[2]
    assert sum(second) == total  # every candidate counted once
    assert len(second) >= total // 50 and max(second) <= 50  # ... chunk by chunk while they are scored


def test_vote_uncertainty_tells_progress_per_chunk() -> None:
    images = torch.randint(0, 255, (10, 1, 8, 8), dtype=torch.uint8)
    told: list[int] = []
    vote_uncertainty(
        lambda x: torch.randn(len(x), 3),
        lambda idx: images[idx],
        torch.arange(10),
        "vr",
        2,
        torch.Generator().manual_seed(0),
        lambda x: x.float(),
        chunk_images=8,
        progress=told.append,
    )
    assert told == [4, 4, 2]
