import pytest
import torch

from rmconsole.cl.data import load_digits
from rmconsole.cl.events import Reporter
from rmconsole.cl.loop import run_protocol
from rmconsole.config import load_config


class Recorder(Reporter):
    def __init__(self) -> None:
        self.plans, self.memories, self.phases, self.outcomes = [], [], [], []

    def run_started(self, plans, class_order, class_names, pipeline):
        self.plans = plans

    def phase(self, task, name, total):
        self.phases.append((task, name, total))

    def memory_updated(self, task, histogram, slots_per_class, info):
        self.memories.append((task, histogram, slots_per_class, info))

    def task_finished(self, outcome, checkpoint):
        self.outcomes.append((outcome, checkpoint))


@pytest.mark.parametrize("method", ["rm", "finetune"])
def test_digits_protocol_end_to_end(method: str) -> None:
    _, cfg = load_config(None, {"method": method, "epochs": 3})
    rec = Recorder()
    outcomes = run_protocol(cfg, load_digits(), torch.device("cpu"), rec)
    assert len(outcomes) == 5 and len(rec.plans) == 5
    assert [m[0] for m in rec.memories] == [0, 1, 2, 3, 4]
    assert all(sum(h) == 200 for _, h, _, _ in rec.memories)
    assert rec.memories[-1][2] == 20  # slots per class = K / 10
    assert {name for _, name, _ in rec.phases} >= {"stream", "memory update", "memory", "evaluation"}
    assert all(0 <= o.accuracy <= 100 for o in outcomes)
    assert outcomes[-1].accuracy > 20  # well above chance (10%) even with 3 epochs
    if method == "rm":
        assert "chosen_uncertainty" in rec.memories[1][3] and "note" in rec.memories[0][3]


def test_rm_online_batches_are_half_memory() -> None:
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup, Task, method_class

    _, cfg = load_config(None, {"epochs": 1})
    data = load_digits()
    proto = build_protocol(cfg, data)
    setup = Setup(
        cfg,
        data,
        proto.train_labels,
        proto.test_labels,
        proto.groups,
        torch.device("cpu"),
        make_augmenter(cfg, data, torch.device("cpu")),
    )
    rm = method_class("rm")(setup)
    task0 = Task(0, proto.tasks[0], 5)
    assert all(len(b) == 16 for b in rm.stream_batches(task0)[:-1])  # empty memory: whole batch is stream
    rm.memory.replace(proto.tasks[0][:200], proto.train_labels[proto.tasks[0][:200]])
    batches = rm.stream_batches(Task(1, proto.tasks[1], 5))
    memory = set(rm.memory.indices.tolist())
    for b in batches:
        assert sum(int(i) in memory for i in b[8:]) == 8  # second half from memory
    assert rm.memory_batch_size == 8


def test_disjoint_evaluates_seen_classes_only() -> None:
    _, cfg = load_config(None, {"blurry": 0, "epochs": 1, "method": "finetune"})
    outcomes = run_protocol(cfg, load_digits(), torch.device("cpu"))
    assert [len(o.eval_classes) for o in outcomes] == [2, 4, 6, 8, 10]
