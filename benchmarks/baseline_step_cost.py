"""Milliseconds per training step of each baseline on MNIST-shaped data (MLP400, batch 16).

What EWC's and Rwalk's bookkeeping costs on top of experience replay, and the other methods'
extra forward passes (iCaRL's and BiC's previous model). Synthetic 28x28 images, so no dataset
is needed; one CPU thread by default. Usage:

    python benchmarks/baseline_step_cost.py [--steps 300] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from rmconsole.cl.data import Dataset, TensorImages
from rmconsole.cl.loop import build_protocol, make_augmenter
from rmconsole.cl.methods import Setup, Task, method_class
from rmconsole.config import build_config


def synthetic_mnist(n_train: int = 20000, n_test: int = 1000) -> Dataset:
    gen = torch.Generator().manual_seed(0)

    def make(n: int) -> TensorImages:
        return TensorImages(
            torch.randint(0, 256, (n, 1, 28, 28), generator=gen, dtype=torch.uint8),
            torch.randint(0, 10, (n,), generator=gen),
        )

    return Dataset("mnist", make(n_train), make(n_test), [str(i) for i in range(10)], (0.1307,), (0.3081,))


def step_cost(name: str, data: Dataset, steps: int) -> float:
    cfg = build_config(
        {
            "dataset": "mnist",
            "model": "mlp400",
            "method": name,
            "memory_size": 500,
            "augment": "none",
            "epochs": 1,
            "bic_bias_epochs": 1,
        }
    )
    proto = build_protocol(cfg, data)
    cpu = torch.device("cpu")
    setup = Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
    method = method_class(name)(setup)
    first = Task(0, proto.tasks[0][:600], 5)
    method.before_task(first)
    kept = first.stream[: method.memory.capacity]
    method.memory.replace(kept, proto.train_labels[kept])
    method.after_task(first)  # EWC/Rwalk consolidate: their penalty is active from here on
    task = Task(1, proto.tasks[1], 5)
    method.before_task(task)  # iCaRL/BiC: the previous model now runs on every batch
    batches = method.shuffled_batches(proto.tasks[1][: steps * 16], 16)
    method.fit(1, lambda e: batches[:20], "warm-up", task)
    started = time.perf_counter()
    method.fit(1, lambda e: batches, "timed", task)
    return (time.perf_counter() - started) / len(batches) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = synthetic_mnist()
    base = None
    for name in ("finetune", "ewc", "rwalk", "icarl", "bic", "gdumb"):
        ms = step_cost(name, data, args.steps)
        base = base or ms
        print(f"{name:9s} {ms:6.2f} ms/step  ({ms / base:4.2f}x finetune)", flush=True)


if __name__ == "__main__":
    main()
