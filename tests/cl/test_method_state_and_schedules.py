"""Pins written against the mutants that survived the methods' own tests (issue 29 item 1):
RM's batches, checkpoint and task ends; GDumb's task-free checkpoint keys; BiC's bias fitting
and init; CLIB's adaptive learning rate; the base Method's optimiser, schedule, CutMix loss,
progress, checkpoint and CUDA-graph gates; the task-free mixin's optimiser, augmentation chunks,
exp_reset steps and head rules; EWC's Fisher and Rwalk's path integral, running Fisher and task
end; iCaRL's loss and nearest-mean gaps; the incremental teacher; ER's and joint's schedules.
Each test is named test_<method>_...: tools/mutation.py runs a module's own (`_survivors`).
Tiny tensors, no real training."""

from __future__ import annotations

import pytest
import torch
from support.online_helpers import Recorder, built, config, feed, tiny_data


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
    m, _, _ = built("rm", batch_size=9)
    stream = torch.arange(20, 40)
    plain = m.stream_batches(_task(0, stream))  # empty memory: whole batches of stream
    assert [len(b) for b in plain] == [9, 9, 2] and sorted(torch.cat(plain).tolist()) == list(range(20, 40))
    memory = torch.tensor([100, 101, 102, 103, 104])
    m.memory.replace(memory, torch.zeros(5, dtype=torch.long))
    batches = m.stream_batches(_task(1, stream))
    assert [len(b) for b in batches] == [9, 9, 9, 9]  # 5 stream + 4 memory, 4 stream batches of 5
    assert all(
        set(b[:5].tolist()) <= set(range(20, 40)) and set(b[5:].tolist()) <= set(memory.tolist()) for b in batches
    )
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
    trained = []
    online_train = m.online_train
    m.online_train = lambda idx, iterations: (trained.extend(idx.tolist()), online_train(idx, iterations))
    stream = feed(m, proto, 16)
    assert m.task_stream == stream
    assert trained == stream  # it trained on the stream meanwhile (in ER's batches)


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


# ------------------------------------------------------------------------------ BiC


class _Logs(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def log(self, message: str) -> None:  # type: ignore[override]
        self.lines.append(message)


def _bic_unstarted(**over):  # type: ignore[no-untyped-def]
    """A BiC as its constructor leaves it (online_start not called)."""
    from rmconsole.cl.loop import make_augmenter
    from rmconsole.cl.methods import Setup, method_class
    from rmconsole.cl.online import build_online_protocol

    cfg = config(method="bic", **over)
    data = tiny_data()
    cpu = torch.device("cpu")
    torch.manual_seed(cfg.seed)
    proto = build_online_protocol(cfg, data)
    setup = Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
    return method_class("bic")(setup), proto


def test_bic_constructor_holds_out_its_share_of_the_memory() -> None:
    m, _ = _bic_unstarted(memory_size=100, bic_val_fraction=0.2)
    assert m.val_capacity == 20 and m.memory.capacity == 80
    assert m.new_classes.dtype == torch.bool and m.old_classes.dtype == torch.bool
    state = m.state_dict()  # before online_start: the task protocol's state
    assert "bic_online" not in state and state["bic"]["bias_history"] == []
    m.bias_history = [{"task": 0, "note": "x"}]
    other, _ = _bic_unstarted(memory_size=100, bic_val_fraction=0.2)
    other.load_state_dict(m.state_dict())
    assert other.bias_history == [{"task": 0, "note": "x"}]


def test_bic_after_task_records_the_new_classes() -> None:
    m, _ = _bic_unstarted()
    m.setup.reporter = _Logs()
    m.new_classes[[2, 5]] = True
    m.after_task(_task(0, torch.arange(4)))
    assert m.bias_history == [{"task": 0, "classes": [2, 5], "note": "not fitted: no old classes or no new classes"}]


def _sgd_bias_fit(m, logits, labels, epochs, gen):  # type: ignore[no-untyped-def]
    """BiC's stage 2 by hand: SGD (momentum 0.9) on one (alpha, beta) of the new classes."""
    pair = torch.tensor([1.0, 0.0], requires_grad=True)
    opt = torch.optim.SGD([pair], lr=m.cfg.lr, momentum=0.9)
    new = m.new_classes

    def corrected(rows):  # type: ignore[no-untyped-def]
        out = torch.where(new, logits[rows] * pair[0] + pair[1], logits[rows] * m.alpha + m.beta)
        return out.masked_fill(~m.seen, torch.finfo(out.dtype).min)

    every = torch.arange(len(labels))
    with torch.no_grad():
        before = float(torch.nn.functional.cross_entropy(corrected(every), labels))
    for _ in range(epochs):
        for rows in torch.randperm(len(labels), generator=gen).split(m.cfg.batch_size):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(corrected(rows), labels[rows]) + 0.1 * pair[1] ** 2 / 2
            loss.backward()
            opt.step()
    return float(pair[0].detach()), float(pair[1].detach()), before


def test_bic_fit_bias_is_sgd_on_the_held_out_logits_with_the_beta_penalty() -> None:
    m, _ = _bic_unstarted(bic_bias_epochs=3, lr=0.5, batch_size=8)
    m.setup.reporter = _Logs()
    m.val_indices = torch.arange(20)
    m.val_labels = m.labels_of(m.val_indices).cpu()
    m.seen[:] = True
    m.new_classes[5:] = True
    m.model.eval()
    with torch.no_grad():
        logits = m.model(m.setup.augmenter.test(m.images_of(m.val_indices)))
    gen = torch.Generator()
    gen.set_state(m.gen.get_state())
    alpha, beta, before = _sgd_bias_fit(m, logits, m.val_labels, 3, gen)
    fit = m.fit_bias(_task(1, torch.arange(4)))
    assert fit["alpha"] == pytest.approx(round(alpha, 4), abs=2e-4) and fit["beta"] == pytest.approx(
        round(beta, 4), abs=2e-4
    )
    assert fit["val_loss_before"] == pytest.approx(round(before, 4), abs=2e-4) and "val_loss_after" in fit
    assert abs(beta) > 1e-3  # the fit moved beta: the penalty term mattered
    assert torch.allclose(m.alpha[5:], torch.tensor(alpha)) and torch.allclose(m.alpha[:5], torch.ones(5))


def _bic_ready_to_fit(passes: int = 3):  # type: ignore[no-untyped-def]
    m, proto, _ = built("bic", bic_anytime_passes=passes)
    m.setup.reporter = _Logs()
    m.seen[:4] = True
    m.task_index = 1
    m.task_classes = [[0, 1], [2, 3]]
    m.task_layers = [(1.0, 0.0), (1.0, 0.0)]
    labels = proto.train_labels
    m.held_out = {y: (labels == y).nonzero().flatten()[:30].tolist() for y in range(4)}  # 120 samples: 2 batches
    m.held_out_full = True
    return m


def test_bic_task_layer_is_adam_on_its_new_classes_and_recorded_to_four_places() -> None:
    m = _bic_ready_to_fit()
    indices = m.held_out_indices()
    m.model.eval()
    with torch.no_grad():
        logits = m.model(m.setup.augmenter.test(m.images_of(indices)))
    labels = m.labels_of(indices)
    gen = torch.Generator()
    gen.set_state(m.gen.get_state())
    order = torch.randperm(len(indices), generator=gen)
    pair = torch.tensor([1.0, 0.0], requires_grad=True)
    opt = torch.optim.Adam([pair], lr=1e-3)
    classes = torch.zeros(10, dtype=torch.bool)
    classes[[2, 3]] = True
    for _ in range(3):
        for rows in order.split(100):
            out = torch.where(classes, logits[rows] * pair[0] + pair[1], logits[rows])
            loss = torch.nn.functional.cross_entropy(out.masked_fill(~m.seen, torch.finfo(out.dtype).min), labels[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
    alpha, beta = float(pair[0].detach()), float(pair[1].detach())
    m.fit_task_layer()
    assert m.anytime_fits == [
        {"task": 1, "alpha": round(m.task_layers[1][0], 4), "beta": round(m.task_layers[1][1], 4), "held_out": 120}
    ]
    assert m.task_layers[1] == (pytest.approx(alpha, abs=1e-6), pytest.approx(beta, abs=1e-6))
    assert m.alpha[2].item() == pytest.approx(alpha, abs=1e-6) and m.alpha[0].item() == 1.0


def test_bic_task_end_log_names_the_fitted_layer_or_why_not() -> None:
    m = _bic_ready_to_fit()
    m.online_task_end(_task(1, torch.arange(4)))
    fitted = m.anytime_fits[-1]
    assert f"alpha {fitted['alpha']}, beta {fitted['beta']}" in m.report.lines[-1]
    m.anytime_fits.append({"task": 0, "alpha": 9.0, "beta": 9.0, "held_out": 1})  # an older task's fit last
    m.held_out_full = False
    m.online_task_end(_task(1, torch.arange(4)))
    assert "not fitted (validation set not full)" in m.report.lines[-1]
    m.task_index, m.anytime_fits = 0, []
    m.online_task_end(_task(0, torch.arange(4)))
    assert "not fitted (task 1)" in m.report.lines[-1]


def test_bic_full_validation_set_takes_no_more_samples() -> None:
    m, _, _ = built("bic")
    m.held_out_full = True
    assert m.hold_out_sample(3, 0) is False and m.held_out == {}
    m.held_out_full = False
    m.held_out = {0: list(range(m.held_out_share))}  # class 0 holds its share already
    assert m.hold_out_sample(99, 0) is False and 99 not in m.held_out[0]


def test_bic_task_free_memory_report_adds_the_validation_set_and_layers() -> None:
    m = _bic_ready_to_fit()
    m.memory_report(_task(1, torch.arange(4)))
    info = m.report.memories[-1][3]
    assert info["validation_per_class"][:5] == [30, 30, 30, 30, 0] and info["bias_layers"] == [(1.0, 0.0), (1.0, 0.0)]


def test_bic_checkpoint_restores_the_current_layer() -> None:
    m = _bic_ready_to_fit()
    m.task_layers[1] = (2.0, 0.5)
    state = m.state_dict()
    other, _, _ = built("bic")
    other.load_state_dict(state)
    assert other.alpha[2].item() == 2.0 and other.beta[3].item() == 0.5 and other.alpha[0].item() == 1.0
    unstarted, _ = _bic_unstarted()
    assert "bic" in unstarted.state_dict()  # task-free, but no held-out set yet: the plain state


# ------------------------------------------------------------------------------ CLIB


def _clib(**over):  # type: ignore[no-untyped-def]
    return built("clib", **over)[0]


def test_clib_starts_with_no_importance_and_no_loss() -> None:
    m = _clib()
    assert m.loss.shape == (0,) and m.importance.shape == (0,) and m.loss.dtype == torch.float64


def test_clib_new_sample_takes_the_mean_importance_of_its_class_without_itself() -> None:
    m = _clib()
    m.store(0, 0)
    m.store(1, 0)
    m.importance = torch.tensor([1.0, 3.0], dtype=torch.float64)
    m.store(2, 0)
    assert m.importance.tolist() == [1.0, 3.0, 2.0]


def test_clib_iteration_records_its_draws_and_updates_importance_every_period() -> None:
    m = _clib(imp_update_period=3)
    for i in range(12):
        m.store(i, i % 2)
    taken, sizes, updates = [], [], []
    images_of = m.images_of
    m.images_of = lambda idx: (taken.extend(idx.tolist()), images_of(idx))[1]
    m.step_on = lambda x, y, n_stream=None, lr=None: sizes.append(len(x))
    m.update_importance = lambda: updates.append((m.update_counter, list(m.drawn)))
    m.iterations(6)  # six iterations' batches augmented in one call, stepped one by one
    assert [c for c, _ in updates] == [3, 6] and len(sizes) == 6
    drawn = updates[0][1]  # at the first update: the slots of the first three steps only
    assert [int(m.memory.indices[s]) for s in drawn] == taken[: sum(sizes[:3])]


def _lr_ready(**over):  # type: ignore[no-untyped-def]
    m = _clib(imp_update_period=1, lr_period=1, lr_length=2, lr=0.1, lr_step=0.5, **over)
    m.loss = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    return m


def _tick(m, loss=None):  # type: ignore[no-untyped-def]
    m.update_counter += 1
    if loss is not None:
        m.loss = torch.tensor(loss, dtype=torch.float64)
    m.adapt_lr()


def test_clib_lr_switches_every_period_and_records_only_after_the_warmup() -> None:
    m = _lr_ready()
    rates = []
    for _ in range(20):
        _tick(m)
        rates.append(m.current_lr)
    assert rates[:4] == [0.05, 0.1, 0.05, 0.1]  # it alternates low / high from the first switch
    assert m.high_records == [] and m.low_records == []  # 20 warm-up ticks record nothing
    _tick(m, [2.0, 1.0, 0.0])  # tick 21, the high rate's turn: the loss fell by 1 where no slot was replaced
    assert m.high_records == [1.0] and m.low_records == []


def test_clib_lr_ignores_slots_replaced_since_the_switch_even_a_new_one() -> None:
    m = _lr_ready()
    m.ticks = 30
    m.prev_loss = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    m.replaced_since_switch = [1, 3]  # slot 3 joined after the last loss: beyond len(loss)
    _tick(m, [2.0, 0.0, 0.0])
    assert m.high_records == [1.0]  # slots 0 and 2 fell by 1; slot 1 (replaced) is left out


def test_clib_lr_moves_only_on_a_significant_test(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmconsole.cl.methods import clib

    m = _lr_ready()
    m.high_records, m.low_records = [1.0, 1.0], [1.0, 1.0]
    m.ticks = 40  # even: the next tick records for the high rate... and the switch makes it low
    monkeypatch.setattr(clib, "welch_greater", lambda a, b: 1 - clib.SIGNIFICANCE)  # at the bound: not significant
    m.prev_loss = None
    _tick(m)
    assert (m.high_lr, m.low_lr) == (0.1, 0.05) and len(m.high_records) == 2
    state = (m.high_lr, m.low_lr, m.lr_is_high, m.ticks, m.prev_loss, list(m.high_records), list(m.low_records))
    monkeypatch.setattr(clib, "welch_greater", lambda a, b: 0.99)  # high does better: both go up
    _tick(m)
    assert (m.high_lr, m.low_lr) == (pytest.approx(0.2), 0.1) and m.high_records == [] == m.low_records
    assert m.current_lr == (m.high_lr if m.lr_is_high else m.low_lr)
    m.high_lr, m.low_lr, m.lr_is_high, m.ticks, m.prev_loss, m.high_records, m.low_records = state
    monkeypatch.setattr(clib, "welch_greater", lambda a, b: 0.01)  # low does better: both go down
    _tick(m)
    assert (m.high_lr, m.low_lr) == (0.05, 0.025) and not m.lr_is_high
    assert m.current_lr == 0.025  # the rate in use follows the move (the switch had set the old high)


# ------------------------------------------------------------------------------ Method (base.py)


def _taskwise(method: str = "finetune", **over):  # type: ignore[no-untyped-def]
    """A method of the task protocol on the tiny 8x8 data, as the loop builds it (no training)."""
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup, method_class
    from rmconsole.config import load_config

    _, cfg = load_config(
        None,
        {"method": method, "augment": "none", "epochs": 1, "batch_size": 8, "memory_size": 40, "threads": 1, **over},
    )
    data = tiny_data()
    cpu = torch.device("cpu")
    proto = build_protocol(cfg, data)
    setup = Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
    torch.manual_seed(cfg.seed)
    return method_class(method)(setup), proto


def test_base_optimiser_is_nesterov_sgd_at_the_runs_rate_over_the_head_only_when_trained() -> None:
    m, _ = _taskwise(lr=0.07, weight_decay=3e-4)
    group = m.make_optimizer().param_groups[0]
    assert (float(group["lr"]), group["momentum"], group["nesterov"], group["weight_decay"]) == (0.07, 0.9, True, 3e-4)
    assert {id(p) for p in group["params"]} == {id(p) for p in m.model.parameters()}
    m, _ = _taskwise(train_head=False)
    optimised = {id(p) for g in m.make_optimizer().param_groups for p in g["params"]}
    assert optimised == {id(p) for n, p in m.model.named_parameters() if not n.startswith("fc.")}


def test_base_shuffled_batches_drop_only_a_last_batch_of_one() -> None:
    m, _ = _taskwise()
    batches = m.shuffled_batches(torch.arange(10), 4)
    assert [len(b) for b in batches] == [4, 4, 2] and sorted(torch.cat(batches).tolist()) == list(range(10))
    assert [len(b) for b in m.shuffled_batches(torch.arange(9), 4)] == [4, 4]  # a batch of one: batch norm needs two


def test_base_memory_and_batching_generator_is_seeded_seed_plus_one() -> None:
    """The model is initialised from `seed`, the memory and batch draws from seed + 1: the
    per-task accuracies of every task-protocol run depend on it."""
    m, _ = _taskwise(seed=3)
    assert torch.equal(m.gen.get_state(), torch.Generator().manual_seed(4).get_state())


def test_base_schedule_online_is_one_stream_pass_then_memory_update_then_memory_epochs() -> None:
    calls: list[tuple] = []
    m, proto = _taskwise(stream="online", epochs=3)
    m.memory.replace(torch.tensor([0, 1, 2]), torch.zeros(3, dtype=torch.long))
    m.fit = lambda epochs, batches, phase, task, chunk_images=None: calls.append((phase, epochs, batches(0)))
    m.update_memory = lambda task: calls.append(("update",))
    m.learn_task(_task(0, proto.tasks[0]))
    assert [c[:2] for c in calls] == [("stream", 1), ("update",), ("memory", 3)]
    stream_pass = torch.cat(calls[0][2]).tolist()
    assert sorted(stream_pass) == sorted(proto.tasks[0].tolist() + [0, 1, 2])  # stream and memory together
    calls.clear()
    m, proto = _taskwise(stream="offline", epochs=3)
    m.fit = lambda epochs, batches, phase, task, chunk_images=None: calls.append((phase, epochs))
    m.update_memory = lambda task: calls.append(("update",))
    m.learn_task(_task(0, proto.tasks[0]))
    assert calls == [("offline", 3), ("update",)]


def test_base_cutmix_loss_weights_the_two_labels_by_lambda() -> None:
    from types import SimpleNamespace

    import torch.nn.functional as nnf

    m, _ = _taskwise()
    m.seen[:6] = True  # classes 6..9 masked
    x = torch.rand(4, 1, 8, 8)
    y_a, y_b = torch.tensor([0, 1, 2, 3]), torch.tensor([5, 4, 3, 2])
    m.setup.augmenter = SimpleNamespace(maybe_cutmix=lambda x, y: (x, y_a, y_b, 0.3))
    m.model.eval()
    logits = m.mask_unseen(m.model(x))
    expected = 0.3 * nnf.cross_entropy(logits, y_a) + 0.7 * nnf.cross_entropy(logits, y_b)
    assert torch.allclose(m.step_loss(x, y_a), expected)
    m.setup.augmenter = SimpleNamespace(maybe_cutmix=lambda x, y: None)
    assert torch.allclose(m.step_loss(x, y_b), nnf.cross_entropy(logits, y_b))


class _Progress(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.advanced = 0

    def phase(self, task: int, name: str, total: int) -> None:
        self.total = total

    def advance(self, n: int) -> None:
        self.advanced += n


@pytest.mark.parametrize("policy", ["random", "uncertainty"])
def test_base_memory_update_advances_its_progress_by_every_candidate_once(policy: str) -> None:
    m, proto = _taskwise(memory_policy=policy)
    m.setup.reporter = progress = _Progress()
    m.memory.replace(torch.tensor([0, 1, 2]), proto.train_labels[:3].cpu())
    task = _task(1, proto.tasks[1])  # (at task 0 the uncertainty policy picks at random: nothing scored)
    m.before_task(task)
    m.update_memory(task)
    assert progress.total == progress.advanced == len(task.stream) + 3
    assert "memory_cached" not in m.memory_info  # an in-memory dataset keeps no decoded cache
    m.setup.data.train.cache = lambda idx: f"{len(idx)} decoded"  # a streamed dataset's cache
    m.update_memory(task)
    assert m.memory_info["memory_cached"] == f"{len(m.memory)} decoded"


def test_base_checkpoint_restores_the_optimiser_and_generator() -> None:
    m, proto = _taskwise()
    m.before_task(_task(0, proto.tasks[0]))
    m.model(torch.rand(4, 1, 8, 8)).sum().backward()
    m.optimizer.step()  # momentum buffers exist now
    m.gen.manual_seed(11)
    state = m.state_dict()
    other, _ = _taskwise()
    assert other.optimizer is None
    other.load_state_dict(state)
    assert other.optimizer is not None and torch.equal(other.gen.get_state(), m.gen.get_state())
    saved = [s["momentum_buffer"] for s in m.optimizer.state.values()]
    loaded = [s["momentum_buffer"] for s in other.optimizer.state.values()]
    assert len(saved) == len(loaded) > 0 and all(torch.equal(a, b) for a, b in zip(saved, loaded))
    state["optimizer"] = None  # a checkpoint before the first task: no optimiser to restore
    third, _ = _taskwise()
    third.load_state_dict(state)
    assert third.optimizer is None


def test_base_a_graphed_run_resumes_with_tensor_learning_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmconsole.cl.methods.finetune import Finetune

    m, proto = _taskwise(lr=0.07)
    m.before_task(_task(0, proto.tasks[0]))
    state = m.state_dict()
    monkeypatch.setattr(Finetune, "uses_graphs", property(lambda self: True))
    other, _ = _taskwise(lr=0.07)
    other.load_state_dict(state)
    lr = other.optimizer.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and float(lr) == pytest.approx(0.07)  # a captured step reads it


def test_base_cuda_graphs_only_for_a_single_process_cuda_run_of_the_plain_step() -> None:
    m, _ = _taskwise(cuda_graphs=True)
    assert not m.uses_graphs  # on the CPU
    m.device = torch.device("cuda")  # what a CUDA run's method holds (nothing runs on it here)
    assert m.uses_graphs
    m.dist = object()  # torchrun's ranks
    assert not m.uses_graphs
    m, _ = _taskwise(cuda_graphs=False)
    m.device = torch.device("cuda")
    assert not m.uses_graphs
    m, _ = _taskwise("ewc", cuda_graphs=True)  # gradient hooks: not the plain step
    m.device = torch.device("cuda")
    assert not m.uses_graphs


def test_base_plain_step_means_no_hook_of_the_step_overridden() -> None:
    from rmconsole.cl.methods.base import Method
    from rmconsole.cl.methods.finetune import Finetune

    class OwnLoss(Finetune):
        def step_loss(self, x, y):  # type: ignore[no-untyped-def]
            return Method.step_loss(self, x, y)

    class OwnMask(Finetune):
        def mask_unseen(self, logits):  # type: ignore[no-untyped-def]
            return logits

    class Hooked(Finetune):
        graphable_step = False

    plain = {cls.__name__: object.__new__(cls).plain_step for cls in (Finetune, OwnLoss, OwnMask, Hooked)}
    assert plain == {"Finetune": True, "OwnLoss": False, "OwnMask": False, "Hooked": False}


def test_base_method_parameter_must_be_a_methodparams_class() -> None:
    from rmconsole.cl.methods.base import Method
    from rmconsole.cl.methods.ewc_params import EWCParams

    class Good(Method[EWCParams]):
        pass

    assert Good.params_type is EWCParams
    with pytest.raises(TypeError, match="must be a MethodParams class"):

        class Bad(Method[int]):  # type: ignore[type-var]
            pass


# ------------------------------------------------------------------------------ EWC, Rwalk


def test_ewc_fisher_draws_its_labels_from_the_methods_generator() -> None:
    """y ~ p(.|x) comes from the method's generator (checkpointed, resumed): the same Fisher
    whatever the global RNG, a different one from another generator state."""
    from rmconsole.cl.methods.ewc import diagonal_fisher

    m, _ = _taskwise("ewc")
    m.seen[:] = True
    idx = torch.arange(24)

    def fisher(gen_seed: int, global_seed: int) -> list[torch.Tensor]:
        m.gen.manual_seed(gen_seed)
        torch.manual_seed(global_seed)
        return diagonal_fisher(m, idx)

    a, b, c = fisher(5, 0), fisher(5, 1), fisher(6, 0)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert any(not torch.equal(x, z) for x, z in zip(a, c))


def _penalty_follows_penalty_step(method: str) -> None:
    """A proximal step leaves the gradient alone; `penalty_step=gradient` adds the penalty's in backward."""
    for step, pulled in (("proximal", False), ("gradient", True)):
        m, _ = _taskwise(method, penalty_step=step)
        q = m.quadratic
        for w, c in zip(q.weights, q.centres):
            w.fill_(1.0)
            c.zero_()
        q.scale, q.active = 2.0, True
        p = m.trainable()[0]
        (p * 0.0).sum().backward()
        expected = 2 * 2.0 * p.detach() if pulled else torch.zeros_like(p)  # d/dp of scale * w * p^2
        assert torch.allclose(p.grad, expected), step


def test_ewc_penalty_is_a_proximal_step_unless_set_as_a_gradient() -> None:
    _penalty_follows_penalty_step("ewc")


def test_rwalk_penalty_is_a_proximal_step_unless_set_as_a_gradient() -> None:
    _penalty_follows_penalty_step("rwalk")


def test_rwalk_running_fisher_weights_the_newest_window_by_alpha() -> None:
    """F <- alpha * F_window + (1 - alpha) * F at alpha = 0.3, each window the mean squared
    task-loss gradient over its `rwalk_interval` steps (the first window is taken as it is)."""
    m, proto = _taskwise("rwalk", rwalk_interval=2, rwalk_alpha=0.3)
    m.before_task(_task(0, proto.tasks[0]))
    p = m.trainable()[0]

    def step(g: float) -> None:
        p.grad = None
        (p * g).sum().backward()  # task-loss gradient g everywhere (the penalty is not active yet)
        m.after_step()

    step(0.5)
    step(0.5)
    assert m.window_steps == 0 and torch.allclose(m.fisher[0], torch.full_like(p, 0.25))
    step(1.0)
    assert m.window_steps == 1 and torch.allclose(m.fisher[0], torch.full_like(p, 0.25))  # window still open
    step(2.0)
    assert m.window_steps == 0
    assert torch.allclose(m.fisher[0], torch.full_like(p, 0.7 * 0.25 + 0.3 * (1.0 + 4.0) / 2))


# ------------------------------------------------------------------------------ TaskFree (taskfree.py)


def test_taskfree_optimiser_is_the_runs_adam_or_nesterov_sgd_at_its_rate() -> None:
    m, _, _ = built("er", lr=0.002, weight_decay=1e-4)
    assert isinstance(m.optimizer, torch.optim.Adam)
    group = m.optimizer.param_groups[0]
    assert (float(group["lr"]), group["weight_decay"]) == (0.002, 1e-4)
    m, _, _ = built("er", optimizer="sgd", lr=0.03, schedule="constant")
    assert isinstance(m.optimizer, torch.optim.SGD)
    group = m.optimizer.param_groups[0]
    assert (float(group["lr"]), group["momentum"], group["nesterov"]) == (0.03, 0.9, True)


def test_taskfree_state_before_online_start_has_no_online_part() -> None:
    from rmconsole.cl.loop import make_augmenter
    from rmconsole.cl.methods import Setup, method_class
    from rmconsole.cl.online import build_online_protocol

    cfg, data = config(method="er"), tiny_data()
    proto = build_online_protocol(cfg, data)
    cpu = torch.device("cpu")
    setup = Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
    state = method_class("er")(setup).state_dict()  # constructed, not started: no temp batch yet
    assert "online" not in state


def test_taskfree_batches_are_augmented_in_chunks_of_at_most_chunk_images(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunk decides the augmentation's draws: whole batches up to the chunk's images (the
    pixel budget over one image's pixels, never less than the largest batch) share one call."""
    from rmconsole.cl import accel

    m, _, _ = built("er")  # 1x8x8 images: 64 pixels each
    taken: list[int] = []
    images_of = m.images_of
    m.images_of = lambda idx: (taken.append(len(idx)), images_of(idx))[1]
    six = [torch.arange(i, i + 6) for i in (0, 6, 12)]
    uneven = [torch.arange(0, 6), torch.arange(6, 8), torch.arange(8, 10), torch.arange(10, 16)]
    for batches, chunk, groups in (
        (six, 10, [6, 6, 6]),
        (six, 12, [12, 6]),
        (six, 18, [18]),
        (uneven, 1, [6, 4, 6]),  # a budget under one batch: chunks of the largest batch, 6
    ):
        monkeypatch.setattr(accel, "TRAIN_CHUNK_PIXELS", chunk * 64)
        taken.clear()
        steps = m.online_steps
        m.train_batches(batches)  # no stream counts: the memory epochs' call
        assert taken == groups and m.online_steps == steps + len(batches), (chunk, taken)


def test_taskfree_exp_reset_rate_decays_per_step_unless_a_rate_is_given() -> None:
    m, _, _ = built("er", lr=0.01, lr_gamma=0.5)
    rates: list[float] = []
    m.stepper = lambda x, y, w: rates.append(float(m.optimizer.param_groups[0]["lr"]))
    m.lr_steps = 0
    m.train_batches([torch.arange(i, i + 4) for i in (0, 4, 8)])
    assert rates == pytest.approx([0.01, 0.005, 0.0025]) and m.lr_steps == 3
    m.train_batches([torch.arange(4)], lr=0.2)  # the memory epochs' own rate: the schedule stands still
    assert rates[-1] == pytest.approx(0.2) and m.lr_steps == 3


def test_taskfree_memory_epochs_need_two_samples_and_an_epoch() -> None:
    m, proto, _ = built("er")
    calls: list[list[int]] = []
    m.train_batches = lambda batches, stream_counts=None, lr=None: calls.append([len(b) for b in batches])
    task = _task(0, proto.tasks[0])
    m.memory.replace(torch.tensor([3]), torch.tensor([0]))
    m.memory_epochs(task, 2, 4)
    assert calls == []  # one sample: batch norm needs two
    m.memory.replace(torch.tensor([3, 5]), torch.tensor([0, 1]))
    m.memory_epochs(task, 0, 4)
    assert calls == []
    m.memory_epochs(task, 2, 4)
    assert calls == [[2], [2]]


def test_taskfree_new_class_head_rules_for_the_optimiser_state() -> None:
    """extend: Adam's state of the head dropped (SGD's momentum zeroed); keep_moments: the
    moments kept, the new class's row zeroed."""
    import torch.nn.functional as nnf

    def stepped(rule: str, **over):  # type: ignore[no-untyped-def]
        m, _, _ = built("er", **over)
        m.head_rule = rule
        m.model.train()
        nnf.cross_entropy(m.model(torch.rand(4, 1, 8, 8)), torch.tensor([0, 1, 2, 3])).backward()
        m.optimizer.step()
        return m

    m = stepped("keep_moments")
    fc = m.model.fc
    before = {k: v.clone() for k, v in m.optimizer.state[fc.weight].items()}
    m.head_takes(3)
    after = m.optimizer.state[fc.weight]
    for key in ("exp_avg", "exp_avg_sq"):
        assert not bool(before[key][3].eq(0).all()) and bool(after[key][3].eq(0).all())
        assert torch.equal(after[key][:3], before[key][:3]) and torch.equal(after[key][4:], before[key][4:])
    assert torch.equal(after["step"], before["step"])
    m = stepped("extend")
    m.head_takes(3)
    head_state = [m.optimizer.state[p] for p in (m.model.fc.weight, m.model.fc.bias)]
    assert all(bool(v.eq(0).all()) for s in head_state for v in s.values())  # restarted in place
    m = stepped("extend", optimizer="sgd", lr=0.05, schedule="constant")
    m.head_takes(3)
    assert bool(m.optimizer.state[m.model.fc.weight]["momentum_buffer"].eq(0).all())


def test_taskfree_new_class_row_is_drawn_as_nn_linear_draws_it_or_the_head_rebuilt() -> None:
    import math

    m, _, _ = built("er")
    fc = m.model.fc
    rows = fc.weight.detach().clone()
    m.head_takes(3)
    bound = 1.0 / math.sqrt(fc.in_features)
    new = fc.weight.detach()[3]
    assert torch.equal(fc.weight.detach()[:3], rows[:3]) and torch.equal(fc.weight.detach()[4:], rows[4:])
    assert not torch.equal(new, rows[3]) and float(new.abs().max()) <= bound
    assert float(new.min()) < 0 < float(new.max()) and float(fc.bias.detach().abs().max()) <= bound
    optimizer = m.optimizer
    m.head_rule = "rebuild"  # the RM port's rule: a new head and a new optimiser
    m.head_takes(4)
    assert m.model.fc is not fc and m.optimizer is not optimizer
    assert any(p is m.model.fc.weight for g in m.optimizer.param_groups for p in g["params"])


# ------------------------------------------------------------------------------ ER (the task protocol's batches)


def test_er_task_protocol_batches_replay_even_a_memory_of_one_from_the_methods_generator() -> None:
    m, proto = _taskwise("er", batch_size=9)
    stream = torch.arange(20)
    m.memory.replace(torch.tensor([100]), torch.tensor([0]))
    batches = m.stream_batches(_task(1, stream))
    assert [b.tolist()[5:] for b in batches] == [[100]] * 4  # 5 stream + min(4, |memory|) memory
    assert sorted(torch.cat([b[:5] for b in batches]).tolist()) == list(range(20))
    m.memory.replace(torch.arange(100, 110), torch.zeros(10, dtype=torch.long))

    def drawn(global_seed: int) -> list[list[int]]:
        m.gen.manual_seed(7)
        torch.manual_seed(global_seed)
        return [b.tolist() for b in m.stream_batches(_task(1, stream))]

    assert drawn(0) == drawn(1)  # every draw from the method's (checkpointed) generator


# ------------------------------------------------------------------------------ iCaRL


def test_icarl_loss_is_bce_summed_over_seen_classes_and_averaged_over_the_batch() -> None:
    """Targets: the labels' one-hot (CutMix: lam * onehot(a) + (1 - lam) * onehot(b)); old
    classes take the previous model's sigmoid instead; classes not seen yet do not count."""
    import copy
    from types import SimpleNamespace

    import torch.nn.functional as nnf

    m, _ = _taskwise("icarl")
    m.seen[:6] = True
    x = torch.rand(4, 1, 8, 8)
    y_a, y_b = torch.tensor([0, 1, 2, 3]), torch.tensor([5, 4, 3, 2])
    m.model.eval()
    logits = m.model(x).detach()

    def expected(target: torch.Tensor) -> torch.Tensor:
        bce = nnf.binary_cross_entropy_with_logits(logits, target, reduction="none")
        return (bce * m.seen).sum(1).mean()

    def onehot(y: torch.Tensor) -> torch.Tensor:
        return nnf.one_hot(y, 10).float()

    m.setup.augmenter = SimpleNamespace(maybe_cutmix=lambda x, y: (x, y_a, y_b, 0.3))
    assert torch.allclose(m.step_loss(x, y_a), expected(0.3 * onehot(y_a) + 0.7 * onehot(y_b)))
    m.setup.augmenter = SimpleNamespace(maybe_cutmix=lambda x, y: None)
    assert torch.allclose(m.step_loss(x, y_b), expected(onehot(y_b)))
    teacher = copy.deepcopy(m.model)
    with torch.no_grad():
        teacher.fc.bias.add_(1.0)
    m.previous_model, m.old_classes = teacher, torch.arange(10) < 3  # classes 0-2 distilled
    target = torch.where(m.old_classes, torch.sigmoid(teacher(x)), onehot(y_b))
    assert torch.allclose(m.step_loss(x, y_b), expected(target.detach()))


def test_icarl_classes_without_exemplars_are_never_predicted() -> None:
    m, proto = _taskwise("icarl")
    labels = proto.train_labels.cpu()
    kept = torch.cat([(labels == c).nonzero().flatten()[:4] for c in (0, 1)])  # exemplars of 0 and 1 only
    m.memory.replace(kept, labels[kept])
    m.seen[:] = True
    scores = m.class_scores(m.setup.augmenter.test(m.setup.data.test.take(torch.arange(16))))
    assert bool(torch.isfinite(scores[:, :2]).all()) and bool(torch.isneginf(scores[:, 2:]).all())


def test_icarl_class_masks_are_boolean_from_construction() -> None:
    m, _ = _taskwise("icarl")
    state = m.state_dict()["icarl"]  # a checkpoint before the first task
    assert state["new_classes"].dtype == state["old_classes"].dtype == torch.bool


# ------------------------------------------------------------------------------ incremental.py (iCaRL's and BiC's)


def test_incremental_teacher_is_a_frozen_eval_mode_copy() -> None:
    from rmconsole.cl.methods.incremental import frozen_copy

    m, _ = _taskwise("icarl")
    m.model.train()
    teacher = frozen_copy(m.model)
    assert teacher is not m.model and not teacher.training and m.model.training
    assert all(not p.requires_grad for p in teacher.parameters())
    assert all(p.requires_grad for p in m.model.parameters())
    x = torch.rand(6, 1, 8, 8)
    before = [b.clone() for b in teacher.buffers()]
    teacher(x)  # eval mode: batch norm reads its running statistics and leaves them alone
    assert all(torch.equal(a, b) for a, b in zip(before, teacher.buffers()))


def test_incremental_a_task_without_major_classes_has_only_unseen_ones_new() -> None:
    from rmconsole.cl.methods.incremental import split_new_old

    before = torch.tensor([1, 1, 0, 0], dtype=torch.bool)
    now = torch.tensor([1, 1, 1, 0], dtype=torch.bool)
    new, old = split_new_old(before, now, [], "task")
    assert new.tolist() == [False, False, True, False] and old.tolist() == [True, True, False, False]


# ------------------------------------------------------------------------------ joint


def test_joint_trains_its_epochs_over_the_whole_set_and_reports_no_memory() -> None:
    for epochs, fits in ((1, [(1, "joint")]), (3, [(3, "joint")]), (0, [])):
        m, proto = _taskwise("joint", epochs=epochs)
        calls: list[tuple[int, str]] = []
        m.fit = lambda epochs, batches, phase, task, chunk_images=None, calls=calls: calls.append((epochs, phase))
        m.learn_task(_task(0, proto.tasks[0], 1))
        assert calls == fits and m.memory_info == {"policy": "none (joint training keeps no memory)"}


def _pulled_back_after_every_step(method: str) -> None:
    """With the penalty on (proximal, the default), each optimiser step ends with the prox step:
    theta <- (theta + 2 t s w c) / (1 + 2 t s w), t = lr / (1 - momentum)."""
    m, proto = _taskwise(method, lr=0.05)
    m.before_task(_task(0, proto.tasks[0]))
    q = m.quadratic
    for w, c in zip(q.weights, q.centres):
        w.fill_(1.0)
        c.zero_()
    q.scale, q.active = 2.0, True
    before = [p.detach().clone() for p in m.trainable()]
    m.after_step()
    t = 0.05 / (1 - 0.9)
    for p, b in zip(m.trainable(), before):
        assert torch.allclose(p.detach(), b / (1 + 2 * t * 2.0), atol=1e-7)


def _stops_when_diverged(method: str) -> None:
    from rmconsole.cl.train import Diverged

    m, proto = _taskwise(method)
    task = _task(0, proto.tasks[0])
    m.before_task(task)
    with torch.no_grad():
        m.trainable()[0].view(-1)[0] = float("nan")
    with pytest.raises(Diverged, match="diverged in task 1"):
        m.after_task(task)  # before the NaN is consolidated into the penalty


def test_ewc_pulls_back_after_every_step() -> None:
    _pulled_back_after_every_step("ewc")


def test_rwalk_pulls_back_after_every_step() -> None:
    _pulled_back_after_every_step("rwalk")


def test_ewc_stops_a_diverged_run_at_the_task_end() -> None:
    _stops_when_diverged("ewc")


def test_rwalk_stops_a_diverged_run_at_the_task_end() -> None:
    _stops_when_diverged("rwalk")


def test_ewc_fisher_samples_are_the_memory_online_and_stream_plus_memory_offline() -> None:
    for stream, expected in (("online", [100, 101]), ("offline", [0, 1, 2, 100, 101])):
        m, _ = _taskwise("ewc", stream=stream)
        m.memory.replace(torch.tensor([100, 101]), torch.zeros(2, dtype=torch.long))
        assert m.fisher_samples(_task(0, torch.tensor([0, 1, 2]))).tolist() == expected


def test_rwalk_a_parameter_without_a_gradient_scores_no_loss_decrease() -> None:
    """-g * delta theta with g the step's own task gradient: a parameter that got none this step
    (moved by weight decay or the prox step) adds nothing to the path integral."""
    m, proto = _taskwise("rwalk", rwalk_interval=100)
    m.before_task(_task(0, proto.tasks[0]))
    p = m.trainable()[0]
    (p * 0.5).sum().backward()
    m.after_step()  # g = 0.5, p did not move
    p.grad = None
    with torch.no_grad():
        p.sub_(0.1)  # moved without a task gradient
    m.after_step()
    assert not bool(m.small_omega[0].any())


def test_rwalk_task_end_averages_the_scores_and_weights_normalised_fisher_plus_score() -> None:
    """s <- (s + s_task) / 2 after the first task; w = minmax(F) + minmax(s), each scaled
    jointly over all parameters to [0, 1]."""
    m, proto = _taskwise("rwalk")
    task = _task(1, proto.tasks[1])
    m.before_task(task)
    for f in m.fisher:
        f.fill_(1.0)
    m.fisher[0].view(-1)[:2] = torch.tensor([2.0, 5.0])  # F in [1, 5]: (F - 1) / 4
    for s, t in zip(m.score, m.task_score):
        s.fill_(1.0)
        t.fill_(3.0)
    m.task_score[1].view(-1)[0] = 11.0  # averaged: 2 everywhere, 6 there: (s - 2) / 4
    m.consolidated = 1
    m.after_task(task)
    assert torch.allclose(m.score[0], torch.full_like(m.score[0], 2.0)) and float(m.score[1].view(-1)[0]) == 6.0
    w0, w1 = m.weight[0].view(-1), m.weight[1].view(-1)
    assert w0[:2].tolist() == [0.25, 1.0] and not bool(w0[2:].any())
    assert float(w1[0]) == 1.0 and not bool(w1[1:].any()) and not any(bool(w.any()) for w in m.weight[2:])
    assert m.consolidated == 2 and not any(bool(t.any()) for t in m.task_score)


def test_ewc_fisher_is_the_mean_over_samples_of_squared_per_sample_gradients() -> None:
    """F = 1/N sum_i (d log p(y_i | x_i) / d theta)^2, y_i ~ p(. | x_i), by hand (one backward per
    sample) against the vmapped chunks (chunks of 5 here: the sum runs over chunks, not a mean per chunk)."""
    import torch.nn.functional as nnf

    from rmconsole.cl.methods.ewc import diagonal_fisher

    m, _ = _taskwise("ewc")
    m.seen[:] = True
    idx = torch.arange(12)
    n_params = sum(p.numel() for p in m.trainable())
    m.gen.manual_seed(2)
    fisher = diagonal_fisher(m, idx, max_floats=5 * n_params)  # chunks of 5, 5, 2
    m.gen.manual_seed(2)
    m.model.eval()
    by_hand = [torch.zeros_like(p) for p in m.trainable()]
    for part in idx.split(5):
        x = m.setup.augmenter.test(m.images_of(part))
        with torch.no_grad():
            probs = torch.softmax(m.model(x), dim=-1)
        y = torch.multinomial(probs.float(), 1, generator=m.gen).flatten()
        for xi, yi in zip(x, y):
            m.model.zero_grad()
            nnf.log_softmax(m.model(xi.unsqueeze(0)), dim=-1)[0, yi].backward()
            for acc, p in zip(by_hand, m.trainable()):
                acc += p.grad.pow(2)
    assert all(torch.allclose(f, h / 12, rtol=1e-4, atol=1e-9) for f, h in zip(fisher, by_hand))


def test_rwalk_a_task_starts_its_path_integral_from_its_first_parameters() -> None:
    """theta before the first step (and the window's start) are the parameters the task starts
    with, whatever moved them since the last step (a rebuilt head, a restore)."""
    m, proto = _taskwise("rwalk")
    m.before_task(_task(0, proto.tasks[0]))
    with torch.no_grad():
        for p in m.trainable():
            p.add_(0.5)
    m.before_task(_task(1, proto.tasks[1]))
    params = [p.detach() for p in m.trainable()]
    assert all(torch.equal(a, p) for a, p in zip(m.previous, params))
    assert all(torch.equal(a, p) for a, p in zip(m.window_start, params))


def test_rwalk_path_integral_sums_each_steps_own_move() -> None:
    """small omega = sum over steps of -g_k * (theta_k - theta_{k-1}): each step's move is
    measured from the step before it, not from the task's start."""
    m, proto = _taskwise("rwalk", rwalk_interval=100)
    m.before_task(_task(0, proto.tasks[0]))
    p = m.trainable()[0]
    for g, move in ((0.5, 0.1), (2.0, 0.3)):
        p.grad = None
        (p * g).sum().backward()
        with torch.no_grad():
            p.sub_(move)
        m.after_step()
    assert torch.allclose(m.small_omega[0], torch.full_like(p, 0.5 * 0.1 + 2.0 * 0.3))


def test_scr_task_free_optimiser_trains_the_projection_head_too() -> None:
    """SCR's contrastive loss is taken on the projection head's output: task-free, its parameters
    are a group of the run's optimiser (else the head stays at its random init)."""
    m, _, _ = built("scr")
    optimised = {id(p) for group in m.make_optimizer().param_groups for p in group["params"]}
    assert {id(p) for p in m.projection.parameters()} <= optimised


def test_scr_recipe_generator_is_its_own_seeded_from_the_run_and_checkpointed() -> None:
    """The recipe's draws come from a generator seeded 7919 x (seed + 1), apart from the pipeline's;
    a checkpoint carries its state, so a resumed run draws the same views."""
    m, proto, _ = built("scr", scr_views="recipe", seed=3)
    assert m.recipe_gen.initial_seed() == 7_919 * 4
    feed(m, proto, 40)  # the recipe has drawn
    state = m.state_dict()
    fresh, _, _ = built("scr", scr_views="recipe", seed=3)
    assert not torch.equal(fresh.recipe_gen.get_state(), m.recipe_gen.get_state())
    fresh.load_state_dict(state)
    assert torch.equal(fresh.recipe_gen.get_state(), m.recipe_gen.get_state())
    old = {k: v for k, v in state.items() if k != "recipe_gen"}  # a checkpoint written before scr_views
    older, _, _ = built("scr", scr_views="recipe", seed=3)
    older.load_state_dict(old)
    assert older.recipe_gen.initial_seed() == 7_919 * 4


def test_scr_recipe_views_train_in_train_mode_on_any_batch_of_two_or_more() -> None:
    """Each recipe step trains the model in train mode (batch norm's statistics move) on a batch of
    at least two images; a batch of one is skipped, as train_batches does."""
    m, proto, _ = built("scr", scr_views="recipe", augment="none")
    feed(m, proto, 40)
    steps = []
    real = m.step_on

    def counted(x, y):  # type: ignore[no-untyped-def]
        steps.append(len(x))
        return real(x, y)

    m.step_on = counted
    bn = next(layer for layer in m.model.modules() if isinstance(layer, torch.nn.BatchNorm1d))
    m.model.eval()
    before = bn.running_mean.clone()
    one = torch.cat(proto.tasks)[:1]
    m.train_recipe_views(one, 1, 3)  # one streamed + one from memory: a batch of two
    assert steps == [4, 4, 4]  # two views of two images, three times
    assert m.model.training and not torch.equal(bn.running_mean, before)
    m.train_recipe_views(one, 0, 2)  # a batch of one
    assert steps == [4, 4, 4]
