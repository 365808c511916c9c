"""The task-free protocol (cl/online.py, PROTOCOL §9.2-9.3) and the follow-up's ER (taskfree.py)."""

from __future__ import annotations

import math

import pytest
import torch
from support.online_helpers import Recorder, built, config, feed, tiny_data

from rmconsole.cl.loop import run_protocol
from rmconsole.cl.methods import method_class
from rmconsole.cl.online import build_online_protocol
from rmconsole.config import ConfigError, load_config


def test_driver_anytime_points_scope_and_task_ends() -> None:
    data = tiny_data()
    cfg = config(method="er", eval_period=25)
    rec = Recorder()
    outcomes = run_protocol(cfg, data, torch.device("cpu"), rec)
    total = sum(p.n_samples for p in rec.plans)
    assert len(outcomes) == 5 and len(rec.points) == total // 25
    assert [p.samples for p in rec.points] == list(range(25, total + 1, 25))
    # labels by first appearance: after s samples the classes exposed are labels 0..n-1, and each
    # point is evaluated on exactly the classes the stream has shown by then
    proto = build_online_protocol(cfg, data)
    seq = proto.train_labels[torch.cat(proto.tasks)]
    assert [data.train.labels[torch.cat(proto.tasks)][0].item()] == rec.class_order[:1]
    assert all(int(seq[:k].max()) + 1 == len(set(seq[:k].tolist())) for k in range(1, len(seq) + 1, 7))
    for p in rec.points:
        assert p.n_classes == int(seq[: p.samples].max()) + 1
    # the task-end evaluations: on the exposed classes, with the loop's compute numbers
    last = outcomes[-1]
    assert last.eval_classes == list(range(10))
    online = last.extra["online"]
    assert (
        online["samples_seen"] == total and online["samples_skipped"] == 0 and online["evaluations"] == len(rec.points)
    )
    assert online["A_auc"] == pytest.approx(sum(p.accuracy for p in rec.points) / len(rec.points))
    assert online["train_seconds"] > 0 and online["eval_seconds"] > 0
    # first appearances travel with the stream plan
    assert sum(len(p.first_appearances) for p in rec.plans) == 10


class Spy:
    """Wraps a method's train_batches to record every batch (and its stream part)."""

    def __init__(self, m) -> None:  # type: ignore[no-untyped-def]
        self.batches: list[tuple[list[int], int | None]] = []
        original = m.train_batches

        def spy(batches, stream_counts=None, lr=None):  # type: ignore[no-untyped-def]
            for b, n in zip(batches, stream_counts or [None] * len(batches)):
                self.batches.append((b.tolist(), n))
            return original(batches, stream_counts, lr)

        m.train_batches = spy


@pytest.mark.parametrize(
    "online_iter,expected", [(1.0, [4, 4, 4]), (0.5, [2, 2, 2]), (1.5, [6, 6, 6]), (0.25, [1, 1, 1]), (0.3, [1, 1, 1])]
)
def test_er_temp_batch_and_fractional_updates(online_iter: float, expected: list[int]) -> None:
    """batch 8: every 4 samples the temp batch is full and int(budget) iterations run, the
    fraction carrying over (0.3 x 4 = 1.2 -> 1, then 1.4 -> 1, then 1.6 -> 1)."""
    m, proto, _ = built("er", online_iter=online_iter)
    spy = Spy(m)
    per_call = []
    for k in range(3):
        before = len(spy.batches)
        feed_from(m, proto, 4 * k, 4)
        per_call.append(len(spy.batches) - before)
    assert per_call == expected
    assert m.num_updates == pytest.approx(3 * 4 * online_iter - sum(expected))


def feed_from(m, proto, start: int, n: int) -> None:  # type: ignore[no-untyped-def]
    stream = torch.cat(proto.tasks)[start : start + n]
    for index in stream.tolist():
        label = int(proto.train_labels[index])
        if not bool(m.seen[label]):
            m.online_new_class(label)
        m.online_observe(index, label)


def test_er_batches_are_temp_plus_memory_and_memory_is_reservoir() -> None:
    m, proto, _ = built("er")
    spy = Spy(m)
    stream = feed(m, proto, 200)
    assert m.memory.capacity == 40 - 4 and len(m.memory) == 36  # K - batch/2, as the follow-up's ER
    assert m.memory.seen == 200  # every streamed sample was offered to the reservoir
    for k, (batch, n_stream) in enumerate(spy.batches):
        temp = stream[(k // 4) * 4 : (k // 4) * 4 + 4]
        assert batch[:4] == temp and n_stream == 4  # the whole temp batch, each iteration
        memory_part = batch[4:]
        assert len(memory_part) == min(4, (k // 4) * 4) and len(set(memory_part)) == len(memory_part)
        assert not set(memory_part) & set(temp)
    # the reservoir keeps a uniform sample of the stream: early samples survive too
    assert min(stream.index(i) for i in m.memory.indices.tolist()) < 50


def test_reservoir_is_algorithm_r() -> None:
    """Each of 2,000 offered samples ends in a 50-slot reservoir with probability 50/2000."""
    import random

    from rmconsole.cl.online_memory import OnlineMemory

    hits = torch.zeros(2000)
    for trial in range(200):
        mem, rng = OnlineMemory(50), random.Random(trial)
        for i in range(2000):
            mem.reservoir(i, i % 10, rng)
        hits[mem.indices] += 1
    rate = hits.view(4, 500).mean(1) / 200  # the stream's quarters: all kept alike
    assert torch.allclose(rate, torch.full((4,), 50 / 2000), atol=0.004), rate


def test_new_class_head_and_lr_reset() -> None:
    m, proto, _ = built("er")
    feed(m, proto, 40)
    assert m.lr_steps > 0 and m.step_lr() < m.cfg.lr
    new = int(m.seen.sum())  # the next label to arrive
    w_before = m.model.fc.weight.detach().clone()
    b_before = m.model.fc.bias.detach().clone()
    m.online_new_class(new)
    assert m.step_lr() == m.cfg.lr  # exp_reset: back to lr
    assert bool(m.seen[new])
    w = m.model.fc.weight.detach()
    assert not torch.equal(w[new], w_before[new])  # the new row is re-initialised
    assert torch.equal(torch.cat([w[:new], w[new + 1 :]]), torch.cat([w_before[:new], w_before[new + 1 :]]))
    assert not torch.equal(m.model.fc.bias.detach(), b_before)  # the bias too, as the follow-up rebuilds fc
    # Adam's state of the head starts over (in place: step 0, zero moments)
    assert all(bool(v.eq(0).all()) for v in m.optimizer.state[m.model.fc.weight].values())


def test_er_rm_protocol_batches_are_half_memory() -> None:
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup, Task

    _, cfg = load_config(None, {"method": "er", "epochs": 1})
    data = load_digits()
    proto = build_protocol(cfg, data)
    cpu = torch.device("cpu")
    er = method_class("er")(
        Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
    )
    assert er.memory_policy == "reservoir"
    assert all(len(b) == 16 for b in er.stream_batches(Task(0, proto.tasks[0], 5))[:-1])
    er.memory.replace(proto.tasks[0][:200], proto.train_labels[proto.tasks[0][:200]])
    memory = set(er.memory.indices.tolist())
    stream = set(proto.tasks[1].tolist())
    for b in er.stream_batches(Task(1, proto.tasks[1], 5)):
        part = b.tolist()
        assert len(part) == 16 and set(part[:8]) <= stream and set(part[8:]) <= memory and len(set(part[8:])) == 8


def test_compute_budget_skips_samples_but_not_the_clock() -> None:
    data = tiny_data()
    rec = Recorder()
    run_protocol(config(method="er", compute_budget=10.0, eval_period=30), data, torch.device("cpu"), rec)
    online = rec.outcomes[-1].extra["online"]
    total = sum(p.n_samples for p in rec.plans)
    # ER spends 3 x 8 image passes per update, one update per sample: 24 > 10 per sample
    assert online["samples_skipped"] > 0 and online["samples_trained"] + online["samples_skipped"] == total
    assert online["image_passes"] <= 10 * total + 3 * 8 * 4  # within one training call of the budget
    assert [p.samples for p in rec.points] == list(range(30, total + 1, 30))  # the stream's clock
    assert rec.points[-1].n_classes == 10  # evaluated on every class the stream showed


@pytest.mark.parametrize("method", ["er", "bic"])  # BiC: its validation set, bias layers and teacher carry over
def test_task_free_resume_continues_exactly(method: str) -> None:
    from rmconsole.cl.online import run_online

    data = tiny_data(per_class=60) if method == "bic" else tiny_data()
    cfg = config(
        method=method,
        augment="cutmix+autoaug",
        eval_period=20,
        **({"memory_size": 128, "bic_anytime_passes": 16} if method == "bic" else {}),
    )
    full = Recorder()
    run_online(cfg, data, torch.device("cpu"), full)
    checkpoint = full.checkpoints[1]  # after task 2
    rest = Recorder()
    outcomes = run_online(cfg, data, torch.device("cpu"), rest, resume=checkpoint)
    assert [o.task for o in outcomes] == [2, 3, 4]
    assert [o.accuracy for o in outcomes] == [o.accuracy for o in full.outcomes[2:]]
    after = [p for p in full.points if p.task >= 2]
    assert [(p.samples, p.accuracy) for p in rest.points] == [(p.samples, p.accuracy) for p in after]
    assert rest.outcomes[-1].extra["online"]["A_auc"] == pytest.approx(full.outcomes[-1].extra["online"]["A_auc"])


def test_a_checkpoint_written_before_the_clock_kept_its_points_still_resumes() -> None:
    """A checkpoint of the version that kept only the sum of the anytime accuracies (`auc_sum`)
    resumes the same training; the loop's own A_auc then covers the points after the resume."""
    from rmconsole.cl.online import run_online

    cfg = config(method="er", eval_period=20)
    full = Recorder()
    run_online(cfg, tiny_data(), torch.device("cpu"), full)
    checkpoint = dict(full.checkpoints[1])
    clock = dict(checkpoint["online_clock"])
    points = clock.pop("anytime_accuracies")
    checkpoint["online_clock"] = {**clock, "auc_sum": sum(points)}
    rest = Recorder()
    outcomes = run_online(cfg, tiny_data(), torch.device("cpu"), rest, resume=checkpoint)
    assert [o.accuracy for o in outcomes] == [o.accuracy for o in full.outcomes[2:]]
    assert rest.outcomes[-1].extra["online"]["A_auc"] == pytest.approx(
        sum(p.accuracy for p in rest.points) / len(rest.points)
    )


@pytest.mark.parametrize(
    "over,message",
    [
        ({"stream": "iblurry", "method": "icarl"}, "no task-free version"),
        ({"stream": "online", "method": "clib"}, "task-free streams only"),
        ({"stream": "iblurry", "method": "er", "schedule": "cosine"}, "allowed: constant, exp_reset"),
        ({"stream": "online", "method": "er", "optimizer": "adam"}, "only for the task-free streams"),
        ({"stream": "online", "method": "rm", "rm_variant": "iblurry"}, "rm_variant=iblurry"),
        ({"stream": "iblurry", "method": "er", "online_iter": 0}, "online_iter"),
        ({"stream": "iblurry", "method": "er", "disjoint_classes": 120}, "disjoint_classes"),
        (
            {"stream": "iblurry", "method": "er", "class_order": "paper", "dataset": "mnist", "memory_size": 500},
            "first appearance",
        ),
    ],
)
def test_bad_task_free_configs_are_one_line(over: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(
            None, {"schedule": "constant", **over} if over.get("stream") != "online" or "schedule" in over else over
        )
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_auc_is_the_mean_of_the_points() -> None:
    from rmconsole.cl.metrics_anytime import area_under_curve, class_forgetting

    assert area_under_curve([10.0, 20.0, 60.0]) == 30.0 and area_under_curve([]) is None
    # class-wise F_last: class 0 best 80 -> 50 (30), class 1 best 40 -> 40 (0), class 2 never > 0: left out
    rows = [[80.0, 10.0, 0.0], [70.0, 40.0, 0.0], [50.0, 40.0, 90.0]]
    assert class_forgetting(rows) == pytest.approx(15.0)
    assert class_forgetting(rows[:1]) is None
    assert math.isclose(class_forgetting([[50.0, None], [20.0, 30.0]]), 30.0)


def test_follow_up_presets_give_each_method_its_own_settings() -> None:
    _, er = load_config("cifar10-iblurry50-10")
    assert (er.method, er.stream, er.optimizer, er.lr, er.schedule, er.memory_size, er.eval_period) == (
        "er",
        "iblurry",
        "adam",
        3e-4,
        "exp_reset",
        500,
        100,
    )
    _, rm = load_config("cifar10-iblurry50-10", {"method": "rm"})
    assert (rm.optimizer, rm.lr, rm.schedule, rm.epochs) == ("sgd", 0.05, "constant", 256)
    _, rm = load_config("cifar10-iblurry50-10", {"method": "rm", "lr": 0.1})  # an override still wins
    assert rm.lr == 0.1
    _, clib = load_config("imagenet-iblurry50-10", {"method": "clib"})
    assert (clib.imp_update_period, clib.online_iter, clib.eval_period, clib.n_tasks) == (10, 0.25, 1000, 10)
    _, tiny = load_config("tiny-imagenet-iblurry50-10")
    assert (tiny.memory_size, tiny.online_iter, tiny.batch_size) == (4000, 3, 32)
    _, si = load_config("cifar100-siblurry50-10")
    assert si.stream == "siblurry"


def test_a_bad_method_table_in_a_preset_is_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = 200\n[methods.nosuch]\nlr = 0.1\n')
    with pytest.raises(ConfigError, match=r"\[methods.nosuch\]: unknown method"):
        load_config(str(bad))


def test_the_follow_ups_numbers_ship_as_data() -> None:
    from rmconsole.report.anytime import follow_up_figure, follow_up_figures

    figures = follow_up_figures()
    assert len(figures) == 28  # 7 methods x CIFAR10, CIFAR100, TinyImageNet, ImageNet (PROTOCOL §9.7)
    _, er = load_config("cifar10-iblurry50-10")
    fig = follow_up_figure(er.to_dict())
    assert (fig["row"], fig["mean"], fig["std"]) == ("Baseline-ER", 57.46, 2.25)
    _, rm = load_config("cifar10-iblurry50-10", {"method": "rm"})
    assert follow_up_figure(rm.to_dict()) is None  # RM as its paper defines it: the follow-up has no figure
    _, port = load_config("cifar10-iblurry50-10", {"method": "rm", "rm_variant": "iblurry"})
    assert follow_up_figure(port.to_dict())["mean"] == 23.00
    _, clib = load_config("imagenet-iblurry50-10", {"method": "clib"})
    assert follow_up_figure(clib.to_dict())["mean"] == 28.16
    _, small = load_config("cifar10-iblurry50-10", {"memory_size": 200})
    assert follow_up_figure(small.to_dict()) is None
