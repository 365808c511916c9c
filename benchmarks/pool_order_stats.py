"""What `pool_order` does to a follow-up stream: per task, how many samples it gives to the
blurry pool, how many classes that chunk holds, how many of its blurry classes lose samples and
how many classes arrive as minors elsewhere -- `shuffled` (the default) beside `dataset` (the
Si-Blurry authors' sampler), on the datasets' own storage order (docs/anytime.md).

    RMCONSOLE_DATA=../shared/data PYTHONPATH=. python benchmarks/pool_order_stats.py [--seeds 1 2 3]

MNIST (torchvision's files) stores its classes interleaved; the Tiny-ImageNet subset is an
ImageFolder tree, stored class by class, as Si-Blurry's Tiny-ImageNet and ImageNet-R are.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from rmconsole.cl import streams_iblurry as S


def labels_of(name: str, root: Path) -> torch.Tensor:
    from rmconsole.cl.data import load_dataset

    return load_dataset(name, root=root, pipeline="stream").train.labels.cpu().long()


def runs_of(labels: torch.Tensor) -> int:
    """Maximal runs of one label in storage order (n_classes: stored class by class)."""
    return int((labels[1:] != labels[:-1]).sum()) + 1


def summary(labels: torch.Tensor, split: S.BlurrySplit) -> str:
    parts = []
    for t, chunk in enumerate(split.pooled):
        own = torch.bincount(labels[split.tasks[t]], minlength=int(labels.max()) + 1)
        total = torch.bincount(labels, minlength=int(labels.max()) + 1)
        losing = sum(1 for c in split.blurry[t] if int(own[c]) < int(total[c]))
        minors = len(set(labels[split.tasks[t]].unique().tolist()) - set(split.majors(t)))
        parts.append(
            f"T{t + 1}: {len(chunk):>4} pooled from {len(labels[chunk].unique()) if len(chunk) else 0:>3} cls"
            f" ({losing}/{len(split.blurry[t])} blurry cls lose samples), {minors:>3} minor cls"
        )
    return "\n    ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--datasets", nargs="+", default=["mnist", "tiny_imagenet"])
    args = ap.parse_args()
    root = Path(os.environ.get("RMCONSOLE_DATA", "../shared/data"))
    for name in args.datasets:
        labels = labels_of(name, root)
        n_classes = int(labels.max()) + 1
        print(
            f"{name}: {len(labels)} samples, {n_classes} classes, {runs_of(labels)} runs of one class in storage order"
        )
        for kind in ("iblurry", "siblurry"):
            for seed in args.seeds:
                for order in S.POOL_ORDERS:
                    split = S.make_split(kind, labels, 5, n_classes, 50, 10, seed, order)
                    print(f"  {kind}-50-10 seed {seed} pool_order={order}\n    {summary(labels, split)}")
        print()


if __name__ == "__main__":
    main()
