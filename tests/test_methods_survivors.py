"""Pins written against the mutants that survived the methods' own tests (issue 29 item 1):
RM's batches, checkpoint and task ends; GDumb's task-free checkpoint keys; BiC's bias fitting
and init; CLIB's adaptive learning rate. Tiny tensors, no real training."""

from __future__ import annotations

import pytest
import torch

from online_helpers import built, feed


def _task(index: int, stream: torch.Tensor, n_tasks: int = 5):  # type: ignore[no-untyped-def]
    from rmconsole.cl.learner import Task

    return Task(index, stream, n_tasks)


# ------------------------------------------------------------------------------ RM


def test_rm_memory_batch_is_half_the_batch_rounded_down_unless_set() -> None:
    m, _, _ = built("rm", batch_size=9)
    assert m.memory_batch_size == 4 and isinstance(m.memory_batch_size, int)
    m, _, _ = built("rm", batch_size=8, memory_batch_size=6)
    assert m.memory_batch_size == 6  # a set size wins over batch/2


def test_rm_stream_batches_are_half_stream_half_cycled_memory() -> None:
    m, proto, _ = built("rm", batch_size=9)
    stream = torch.arange(20, 40)
    plain = m.stream_batches(_task(0, stream))  # empty memory: whole batches of stream
    assert [len(b) for b in plain] == [9, 9, 2] and sorted(torch.cat(plain).tolist()) == list(range(20, 40))
    memory = torch.tensor([100, 101, 102, 103, 104])
    m.memory.replace(memory, torch.zeros(5, dtype=torch.long))
    batches = m.stream_batches(_task(1, stream))
    assert [len(b) for b in batches] == [9, 9, 9, 9]  # 5 stream + 4 memory, 4 stream batches of 5
    assert all(set(b[:5].tolist()) <= set(range(20, 40)) and set(b[5:].tolist()) <= set(memory.tolist())
               for b in batches)
    drawn = torch.cat([b[5:] for b in batches]).tolist()
    counts = [drawn.count(i) for i in memory.tolist()]
    assert sorted(counts) == [3, 3, 3, 3, 4]  # the memory cycled: 16 draws over 5 slots, reshuffled per cycle
    assert sorted(torch.cat([b[:5] for b in batches]).tolist()) == list(range(20, 40))


def test_rm_port_fills_its_balanced_memory_with_the_labels_it_saw() -> None:
    m, proto, _ = built("rm", rm_variant="iblurry", optimizer="sgd", lr=0.05, schedule="constant", epochs=1)
    stream = feed(m, proto, 16)
    assert sorted(m.memory.indices.tolist()) == sorted(stream)
    assert m.memory.labels.tolist() == [int(proto.train_labels[i]) for i in m.memory.indices.tolist()]
    assert m.temp == [] and m.temp_labels == []


def test_rm_paper_variant_trains_on_the_stream_and_remembers_it() -> None:
    m, proto, _ = built("rm", optimizer="sgd", lr=0.05, schedule="constant", epochs=1)
    before = [p.detach().clone() for p in m.model.parameters()]
    stream = feed(m, proto, 16)
    assert m.task_stream == stream
    assert any(not torch.equal(a, b) for a, b in zip(before, m.model.parameters()))  # it trained meanwhile


@pytest.mark.parametrize("variant", ["iblurry", "paper"])
def test_rm_task_end_runs_the_memory_epochs_and_says_its_variant(variant: str) -> None:
    m, proto, _ = built("rm", rm_variant=variant, optimizer="sgd", lr=0.05, schedule="constant", epochs=2)
    feed(m, proto, 24)
    calls = []
    m.memory_epochs = lambda task, epochs, batch_size: calls.append((task.index, epochs, batch_size))
    m.online_task_end(_task(0, proto.tasks[0]))
    assert calls == [(0, 2, 8)]
    assert m.memory_info["rm_variant"] == variant
    if variant == "paper":
        assert m.memory_info["policy"] == "uncertainty" and m.task_stream == []


def test_rm_checkpoint_carries_the_task_stream() -> None:
    m, proto, _ = built("rm", optimizer="sgd", lr=0.05, schedule="constant", epochs=1)
    stream = feed(m, proto, 10)
    state = m.state_dict()
    assert state["rm_task_stream"] == stream
    other, _, _ = built("rm", optimizer="sgd", lr=0.05, schedule="constant", epochs=1)
    other.load_state_dict(state)
    assert other.task_stream == stream
    state.pop("rm_task_stream")
    third, _, _ = built("rm", optimizer="sgd", lr=0.05, schedule="constant", epochs=1)
    third.load_state_dict(state)  # an older checkpoint without it: the stream stays as it was
    assert third.task_stream == []
    del third.task_stream  # before online_start: nothing to save
    assert "rm_task_stream" not in third.state_dict()


# ------------------------------------------------------------------------------ GDumb


def _gdumb(**over):  # type: ignore[no-untyped-def]
    return built("gdumb", optimizer="sgd", lr=0.05, schedule="constant", epochs=1, **over)


def test_gdumb_class_mask_is_boolean_and_marks_the_memorys_classes() -> None:
    m, proto, _ = _gdumb()
    assert m.memory_classes.dtype == torch.bool and not bool(m.memory_classes.any())
    feed(m, proto, 30)
    m.online_task_end(_task(0, proto.tasks[0]))  # a task end trains a fresh model as an evaluation does
    assert m.fresh_models == 1 and m.trained_at == (m.memory.seen, len(m.memory))
    assert m.memory_classes.dtype == torch.bool
    assert m.memory_classes.nonzero().flatten().tolist() == sorted(set(m.memory.labels.tolist()))


def test_gdumb_memory_epochs_train_every_epoch_on_the_cosine_rates() -> None:
    from rmconsole.cl.schedule import epoch_lr

    m, proto, _ = _gdumb()
    feed(m, proto, 20)
    seen = []
    m.train_batches = lambda b, stream_counts=None, lr=None: seen.append((sum(len(x) for x in b), lr))
    m.memory_epochs(_task(-1, m.memory.indices, 0), 3, 4)
    assert [lr for _, lr in seen] == [epoch_lr(e, 0.05, "cosine") for e in range(3)]
    assert all(n == len(m.memory) for n, _ in seen)


def test_gdumb_trains_the_task_protocols_fresh_model_for_a_single_epoch() -> None:
    m, proto, _ = _gdumb()
    feed(m, proto, 20)
    fits = []
    m.update_memory = lambda task: None
    m.fit = lambda epochs, batches, phase, task, chunk_images=None: fits.append((epochs, phase))
    m.learn_task(_task(0, proto.tasks[0]))
    assert fits == [(1, "memory")] and m.fresh_models == 1


def test_gdumb_checkpoint_round_trips_its_task_free_state() -> None:
    m, proto, _ = _gdumb()
    fresh = _gdumb()[0].state_dict()  # before any evaluation: trained_at None
    feed(m, proto, 30)
    m.online_before_eval()
    state = m.state_dict()
    other = _gdumb()[0]
    other.load_state_dict(state)
    assert other.fresh_models == 1 and other.trained_at == m.trained_at and isinstance(other.trained_at, tuple)
    assert torch.equal(other.memory_classes, m.memory_classes) and bool(other.memory_classes.any())
    again = _gdumb()[0]
    again.load_state_dict(fresh)
    assert again.trained_at is None and again.fresh_models == 0
    fresh.pop("fresh_models")
    again.fresh_models = 5
    again.load_state_dict(fresh)
    assert again.fresh_models == 0  # an older checkpoint: none counted
