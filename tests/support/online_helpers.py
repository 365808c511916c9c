"""Small task-free set-ups for the tests of the follow-up's protocol and methods: a learnable
synthetic 8x8 dataset (digits-shaped, so configs validate) and a method built on its stream."""

from __future__ import annotations

from typing import Any

import torch

from rmconsole.cl.data import Dataset, TensorImages
from rmconsole.cl.events import Reporter

FOLLOW_UP = {
    "stream": "iblurry",
    "schedule": "exp_reset",
    "optimizer": "adam",
    "lr": 3e-4,
    "weight_decay": 0.0,
    "augment": "none",
    "batch_size": 8,
    "memory_size": 40,
    "eval_period": 50,
    "threads": 1,
}


def tiny_data(per_class: int = 30, test_per_class: int = 8, n_classes: int = 10, seed: int = 0) -> Dataset:
    """Each class a fixed random 8x8 pattern plus noise: learnable in a few hundred steps."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.rand(n_classes, 1, 8, 8, generator=g) * 255

    def split(n: int) -> TensorImages:
        labels = torch.arange(n_classes).repeat_interleave(n)
        labels = labels[torch.randperm(len(labels), generator=g)]
        noise = torch.rand(len(labels), 1, 8, 8, generator=g) * 90
        return TensorImages((protos[labels] * 0.65 + noise).clamp(0, 255).to(torch.uint8), labels)

    return Dataset(
        "digits",
        split(per_class),
        split(test_per_class),
        [f"c{i}" for i in range(n_classes)],
        (0.4,),
        (0.25,),
        crop_padding=1,
    )


def config(**over: Any) -> Any:
    from rmconsole.config import load_config

    return load_config(None, {**FOLLOW_UP, **over})[1]


TASK_FREE_PRESET = "mnist-iblurry50-10"  # the follow-up's settings, each method's own ([methods.NAME])
# methods that prompt a Vision Transformer run the generic tests on the small ViT (cl/vit.py)
VIT_METHODS = ("l2p", "dualprompt", "coda", "mvp")
# vit_tiny has 2 layers: DualPrompt's and MVP's G-prompt on layer 0, their E-prompts on layer 1
SHALLOW_VIT: dict[str, dict[str, Any]] = {
    "dualprompt": {"dp_g_end": 1, "dp_e_end": 2},
    "coda": {"coda_layers": 2, "coda_components": 10},
    "mvp": {"mvp_g_end": 1, "mvp_e_end": 2},
}


# methods whose defaults cost too much for a generic test, where the generic tests' rules do not
# depend on it: OCM forwards 2 x 16 transformed copies of every sample (64 memory samples by
# default), OnPro 16 rotations x 2 views of a 64-sample memory batch per step: smaller batches,
# the same mechanics
SMALL_STEPS: dict[str, dict[str, Any]] = {
    "ocm": {"ocm_memory_batch": 8},
    "onpro": {"onpro_memory_batch": 2, "onpro_projection": 8, "online_iter": 0.25},
}


def method_model(method: str) -> dict[str, Any]:
    """The overrides a method needs in a generic test: {}, the small ViT with its layer settings,
    or a costly method's smaller steps."""
    if method in VIT_METHODS:
        return {"model": "vit_tiny", **SHALLOW_VIT.get(method, {})}
    return dict(SMALL_STEPS.get(method, {}))


def defaults_on_digits(method: str, **over: Any) -> Any:
    """`method`'s defaults on digits under a protocol it declares: the embedded default preset
    (the task protocol, stream=online) where the method runs under it, else the follow-up's
    task-free preset on digits with the default preset's memory size (a task-free-only method
    refuses stream=online and the task protocol's cosine schedule; `protocol_of` says which)."""
    from rmconsole.cl.methods import REGISTRY
    from rmconsole.cl.protocols import protocol_of
    from rmconsole.config import load_config

    over = {**method_model(method), **over}
    if REGISTRY[method].runs_under("task"):
        cfg = load_config(None, {"method": method, **over})[1]
    else:
        digits_k = load_config(None, {})[1].memory_size
        cfg = load_config(TASK_FREE_PRESET, {"dataset": "digits", "memory_size": digits_k, "method": method, **over})[1]
    assert REGISTRY[method].runs_under(protocol_of(cfg)), (method, cfg.stream)
    return cfg


class Recorder(Reporter):
    def __init__(self) -> None:
        self.points: list[Any] = []
        self.outcomes: list[Any] = []
        self.checkpoints: list[Any] = []
        self.plans: list[Any] = []
        self.memories: list[Any] = []

    def run_started(self, plans, class_order, class_names, pipeline):  # type: ignore[no-untyped-def]
        self.plans, self.class_order = plans, class_order

    def anytime_evaluated(self, point):  # type: ignore[no-untyped-def]
        self.points.append(point)

    def memory_updated(self, task, histogram, slots_per_class, info):  # type: ignore[no-untyped-def]
        self.memories.append((task, histogram, slots_per_class, info))

    def task_finished(self, outcome, checkpoint):  # type: ignore[no-untyped-def]
        import copy

        self.outcomes.append(outcome)
        self.checkpoints.append(copy.deepcopy(checkpoint))  # as the worker's torch.save freezes it


def built(method: str, data: Dataset | None = None, **over: Any) -> tuple[Any, Any, Dataset]:
    """(method after online_start, its protocol, the data) for `method` on the tiny stream."""
    from rmconsole.cl.loop import make_augmenter
    from rmconsole.cl.methods import Setup, method_class
    from rmconsole.cl.online import build_online_protocol

    cfg = config(method=method, **over)
    data = data or tiny_data()
    cpu = torch.device("cpu")
    torch.manual_seed(cfg.seed)
    proto = build_online_protocol(cfg, data)
    setup = Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
    m = method_class(method)(setup)
    m.online_start()
    return m, proto, data


def feed(m: Any, proto: Any, n: int) -> list[int]:
    """Stream the first n samples of the stream into `m` as the driver does; returns their indices."""
    stream = torch.cat(proto.tasks)[:n]
    for index in stream.tolist():
        label = int(proto.train_labels[index])
        if not bool(m.seen[label]):
            m.online_new_class(label)
        m.online_observe(index, label)
    return stream.tolist()
