"""(a) A CIFAR-shaped RM run end to end: wall time and samples/s per phase, peak memory (c).

    python benchmarks/cifar_run.py                  # the paper's setting (a GPU job)
    python benchmarks/cifar_run.py --quick          # scaled down so that it runs on a CPU
    python benchmarks/cifar_run.py --amp off --compile false --channels-last false   # the plain path

The full setting: synthetic 3x32x32 images, 50,000 train / 10,000 test, 10 classes, 5 tasks
(Blurry10-Online), K = 500, ResNet18 (CIFAR stem), RM with CutMix + AutoAugment, uncertainty
by 12 RandAugment views, batch 16 (memory-only batches 8), 256 memory epochs per task. It runs
through `cl.loop.run_protocol`, the code a real run uses, on random pixels with random labels
(speed does not depend on what the pixels show; accuracy is meaningless here and not shown).

Phases: `stream` (one pass over the task's stream, half stream / half memory batches),
`memory update` (RM's uncertainty scoring of memory + stream candidates, samples = candidates),
`memory` (the E epochs on the memory alone), `evaluation` (the test samples of seen classes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from common import TimingReporter, accel_settings, add_accel_options, machine

from rmconsole.cl.data import Dataset, TensorImages
from rmconsole.cl.loop import run_protocol
from rmconsole.config import ConfigError, build_config


def synthetic_cifar(n_train: int, n_test: int, seed: int = 0) -> Dataset:
    gen = torch.Generator().manual_seed(seed)

    def split(n: int) -> TensorImages:
        images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=gen)
        labels = torch.arange(n) % 10
        return TensorImages(images, labels[torch.randperm(n, generator=gen)])

    return Dataset(
        "cifar10",
        split(n_train),
        split(n_test),
        [f"class{i}" for i in range(10)],
        (0.4914, 0.4822, 0.4465),
        (0.2023, 0.1994, 0.2010),
        crop_padding=4,
    )


def padded_mnist(root: Path) -> Dataset:
    """MNIST as CIFAR-shaped input (28x28 padded to 32x32, grey copied to 3 channels): the
    same compute as CIFAR10 with labels that can be learned, so the accuracy is a real check."""
    from rmconsole.cl.data import load_dataset

    mnist = load_dataset("mnist", root)

    def split(part: TensorImages) -> TensorImages:
        images = torch.nn.functional.pad(part.images, (2, 2, 2, 2)).expand(-1, 3, -1, -1).contiguous()
        return TensorImages(images, part.labels)

    return Dataset(
        "cifar10",
        split(mnist.train),
        split(mnist.test),
        list(mnist.class_names),
        (0.1307,) * 3,
        (0.3081,) * 3,
        crop_padding=4,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="1,000 train / 200 test, K=100, 1 memory epoch, 4 views: minutes on a CPU"
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--train", type=int, help="train samples (default 50,000; --quick 1,000)")
    parser.add_argument("--test", type=int, help="test samples (default 10,000; --quick 200)")
    parser.add_argument("--memory", type=int, help="K (default 500; --quick 100)")
    parser.add_argument("--epochs", type=int, help="memory epochs per task (default 256; --quick 1)")
    parser.add_argument("--views", type=int, help="uncertainty views (default 12; --quick 4)")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument(
        "--data",
        choices=["synthetic", "mnist"],
        default="synthetic",
        help="random pixels, or MNIST padded to 3x32x32 (needs RMCONSOLE_DATA) for a real accuracy",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument(
        "--memory-share",
        type=float,
        default=1.0,
        help="this run's share of its GPU, as a worker of `--runs-per-gpu N` gets (1/N): the CUDA "
        "allocator is capped and the forward passes shrink",
    )
    add_accel_options(parser)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    quick = args.quick
    n_train = args.train or (1000 if quick else 50000)
    n_test = args.test or (200 if quick else 10000)

    try:
        cfg = build_config(
            {
                "dataset": "cifar10",
                "model": args.model,
                "method": "rm",
                "memory_size": args.memory or (100 if quick else 500),
                "n_tasks": 5,
                "blurry": 10,
                "stream": "online",
                "augment": ["cutmix", "autoaug"],
                "uncertainty": "randaug",
                "uncertainty_views": args.views or (4 if quick else 12),
                "epochs": args.epochs if args.epochs is not None else (1 if quick else 256),
                "batch_size": 16,
                "lr": 0.05,
                "schedule": "cosine",
                "seed": args.seed,
                "device": args.device,
                **accel_settings(args),
            }
        )
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    device = torch.device(
        "cuda"
        if cfg.device == "auto" and torch.cuda.is_available()
        else ("cpu" if cfg.device == "auto" else cfg.device)
    )
    print(machine())
    print(
        f"workload: {args.data} 3x32x32, {n_train:,} train / {n_test:,} test, 10 classes, 5 tasks blurry10 online, "
        f"K={cfg.memory_size}, {cfg.model}, RM cutmix+autoaug, {cfg.uncertainty_views} randaug views, "
        f"batch {cfg.batch_size}, {cfg.epochs} memory epochs; device {device}" + (" (--quick)" if quick else "")
    )
    if args.data == "mnist":
        from rmconsole.cl.datasets import data_root

        data = padded_mnist(data_root())
        if args.train or args.test:
            data = Dataset(
                data.name,
                TensorImages(data.train.images[:n_train], data.train.labels[:n_train]),
                TensorImages(data.test.images[:n_test], data.test.labels[:n_test]),
                data.class_names,
                data.mean,
                data.std,
                crop_padding=4,
            )
    else:
        data = synthetic_cifar(n_train, n_test)
    if args.memory_share < 1:
        from rmconsole.cl.accel import set_memory_share

        set_memory_share(args.memory_share, device)
    reporter = TimingReporter(device)
    start = time.perf_counter()
    outcomes = run_protocol(cfg, data, device, reporter)
    wall = time.perf_counter() - start
    print(reporter.table(cfg.uncertainty_views))
    a_last = outcomes[-1].accuracy if args.data == "mnist" else None
    if a_last is not None:
        print(
            f"A_last {a_last:.2f} (last epoch, test set of MNIST padded to 3x32x32; accuracy per task: "
            + ", ".join(f"{o.accuracy:.2f}" for o in outcomes)
            + ")"
        )
    print(f"end to end: {wall:.1f} s ({wall / 60:.1f} min) including model build and compilation")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "workload": {
                        "data": args.data,
                        "train": len(data.train),
                        "test": len(data.test),
                        "model": cfg.model,
                        "memory_size": cfg.memory_size,
                        "epochs": cfg.epochs,
                        "views": cfg.uncertainty_views,
                        "batch_size": cfg.batch_size,
                        "seed": cfg.seed,
                        "device": str(device),
                    },
                    "wall_s": wall,
                    "phases": reporter.summary(cfg.uncertainty_views),
                    "a_last": a_last,
                    "memory_share": args.memory_share,
                    "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30
                    if device.type == "cuda"
                    else None,
                    "accuracy_per_task": [o.accuracy for o in outcomes],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
