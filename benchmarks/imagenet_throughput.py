"""(b) ResNet34 throughput on an ImageNet-format tree resized to 224, through the streaming
pipeline: decoding alone, training (Method.fit: decode + augment + forward/backward), and
RM's uncertainty scoring (decode + views + forward); (c) peak memory of each.

    python benchmarks/imagenet_throughput.py                       # GPU sizes (batch 256, 8,192 images)
    python benchmarks/imagenet_throughput.py --device cpu --threads 1 --batch 16 --train 64 --candidates 32 --views 2
    RMCONSOLE_DATA=/data python benchmarks/imagenet_throughput.py --dataset imagenet

The tree is `tiny-imagenet-200` under --root (default RMCONSOLE_DATA, else ../shared/data):
64x64 JPEGs, so decoding is cheaper than ImageNet's ~400x350 ones; the resize to 224 and
everything after it cost what they cost on ImageNet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
from common import TimingReporter, accel_settings, add_accel_options, machine, memory_unit, peak_gib, reset_peak, sync

from rmconsole.cl.data import load_dataset
from rmconsole.cl.datasets import DatasetMissing
from rmconsole.cl.loop import build_protocol, make_augmenter
from rmconsole.cl.methods import Setup, Task, method_class
from rmconsole.config import ConfigError, build_config


def default_root() -> Path:
    """RMCONSOLE_DATA, else the nearest ../shared/data above the repository that has the tree."""
    if os.environ.get("RMCONSOLE_DATA"):
        return Path(os.environ["RMCONSOLE_DATA"])
    for parent in Path(__file__).resolve().parents[1:]:
        if (parent / "shared" / "data" / "tiny-imagenet-200").is_dir():
            return parent / "shared" / "data"
    return Path("data")


def synthetic_tree(root: Path, n_train: int, n_val: int, classes: int = 1000, seed: int = 0) -> Path:
    """An ImageNet-format tree of JPEGs under root/imagenet: ImageNet-like sizes (about 500x375,
    varied), smooth random content (so files are ImageNet-sized, ~100 KB, not incompressible
    noise). Written once; an existing tree with the same counts is reused, another is replaced."""
    from torchvision.io import encode_jpeg

    base = root / "imagenet"
    stamp = base / f".synthetic-{n_train}-{n_val}-{classes}"
    if stamp.exists():
        return root
    shutil.rmtree(base, ignore_errors=True)  # a tree of other counts (or half written) would mix in
    cuda = torch.cuda.is_available()
    where = "cuda" if cuda else "cpu"
    gen = torch.Generator(where).manual_seed(seed)
    for split, n in (("train", n_train), ("val", n_val)):
        for c in range(classes):
            (base / split / f"n{c:08d}").mkdir(parents=True, exist_ok=True)
        for start in range(0, n, 256):
            count = min(256, n - start)
            images = []
            for _ in range(count):
                h = int(torch.randint(300, 450, (1,), generator=gen, device=where))
                w = int(torch.randint(400, 560, (1,), generator=gen, device=where))
                coarse = torch.rand(1, 3, h // 16, w // 16, generator=gen, device=where) * 255
                img = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bicubic", align_corners=False)
                img = img + torch.randn(1, 3, h, w, generator=gen, device=where) * 12  # texture, like a photo's
                images.append(img[0].clamp(0, 255).to(torch.uint8))
            encoded = encode_jpeg(images, quality=90)
            for k, data in enumerate(encoded):
                i = start + k
                (base / split / f"n{i % classes:08d}" / f"{split}_{i}.JPEG").write_bytes(data.cpu().numpy().tobytes())
    stamp.touch()
    return root


def timed(device: torch.device, work) -> tuple[float, float]:
    sync(device)
    reset_peak(device)
    start = time.perf_counter()
    work()
    sync(device)
    return time.perf_counter() - start, peak_gib(device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--root", type=Path, default=None, help="data root holding tiny-imagenet-200/ (or imagenet/)")
    parser.add_argument("--dataset", default="tiny_imagenet", choices=["tiny_imagenet", "imagenet"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--size", type=int, default=224, help="resize to SIZE x SIZE")
    parser.add_argument("--batch", type=int, default=256, help="training batch (ImageNet preset: 256)")
    parser.add_argument("--train", type=int, default=8192, help="images trained on (one pass)")
    parser.add_argument("--decode", type=int, default=None, help="images decoded alone (default: --train)")
    parser.add_argument("--candidates", type=int, default=2048, help="candidates scored for uncertainty")
    parser.add_argument("--views", type=int, default=12)
    parser.add_argument("--workers", type=int, default=None, help="DataLoader decode workers (default: per core)")
    parser.add_argument("--gpu-decode", default="auto", choices=["auto", "true", "false"])
    parser.add_argument(
        "--synthetic",
        type=int,
        default=0,
        help="write N synthetic ImageNet-sized JPEGs (1000 classes) under --root and read those",
    )
    parser.add_argument(
        "--synthetic-classes", type=int, default=1000, help="classes of the synthetic tree (each needs an image)"
    )
    parser.add_argument("--synthetic-val", type=int, default=1000, help="val images of the synthetic tree")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    add_accel_options(parser)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.synthetic:
        if min(args.synthetic, args.synthetic_val) < args.synthetic_classes:
            print(
                "error: --synthetic and --synthetic-val need an image for each of --synthetic-classes", file=sys.stderr
            )
            return 2
        root = args.root or Path("/tmp/rmconsole-synthetic")
        args.root = synthetic_tree(root, args.synthetic, args.synthetic_val, args.synthetic_classes)
        args.dataset = "imagenet"
    try:
        cfg = build_config(
            {
                "dataset": args.dataset,
                "model": "resnet34",
                "method": "rm",
                "memory_size": 2000 if args.dataset == "tiny_imagenet" else 20000,
                "n_tasks": 10,
                "epochs": 1,
                "batch_size": args.batch,
                "image_size": args.size,
                "augment": ["cutmix", "autoaug"],
                "uncertainty": "randaug",
                "uncertainty_views": args.views,
                "device": args.device,
                "data_pipeline": "stream",
                "loader_workers": args.workers,
                "gpu_decode": {"true": True, "false": False}.get(args.gpu_decode, "auto"),
                **accel_settings(args),
            }
        )
        data = load_dataset(
            cfg.dataset,
            args.root or default_root(),
            image_size=cfg.image_size,
            pipeline="stream",
            loader_workers=cfg.loader_workers,
            gpu_decode=None if cfg.gpu_decode == "auto" else cfg.gpu_decode,
        )
    except (ConfigError, DatasetMissing) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    device = torch.device(
        "cuda"
        if cfg.device == "auto" and torch.cuda.is_available()
        else ("cpu" if cfg.device == "auto" else cfg.device)
    )
    print(machine())
    torch.manual_seed(1)
    protocol = build_protocol(cfg, data)
    data = data.to(device)
    augmenter = make_augmenter(cfg, data, device)
    reporter = TimingReporter(device)
    setup = Setup(
        cfg,
        data,
        protocol.train_labels.to(device),
        protocol.test_labels.to(device),
        protocol.groups,
        device,
        augmenter,
        reporter,
    )
    rm = method_class("rm")(setup)
    source = data.train
    print(
        f"workload: {args.dataset} tree {len(source):,} images resized to {args.size}x{args.size}, ResNet34, "
        f"batch {args.batch}, {cfg.uncertainty_views} randaug views; {rm.accel.describe()}; "
        f"decode: {'nvJPEG on the GPU' if source.decodes_on_gpu else 'CPU'}, "
        f"{source.workers if source.workers is not None else 'default'} DataLoader workers; device {device}"
    )

    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(len(source), generator=gen)
    n_train = min(args.train, len(source))
    decode_idx = order[: min(args.decode or n_train, len(source))]
    train_idx = order[:n_train]
    candidates = order[-min(args.candidates, len(source)) :]
    task = Task(0, train_idx, 10)
    rm.before_task(task)
    rows = []

    warm = train_idx[: 2 * args.batch]  # first calls pay for worker start-up, cuDNN autotuning, compilation
    rm.fit(1, lambda e: list(warm.split(args.batch)), "warm-up", task)
    rm.uncertainty_of(candidates[: max(2, args.batch // max(1, args.views))])

    seconds, peak = timed(device, lambda: [None for _ in source.batches(decode_idx.split(args.batch))])
    rows.append(("decode + resize", len(decode_idx), seconds, peak, ""))
    seconds, peak = timed(device, lambda: rm.fit(1, lambda e: list(train_idx.split(args.batch)), "train", task))
    rows.append(("train (fit)", n_train, seconds, peak, ""))
    seconds, peak = timed(device, lambda: rm.uncertainty_of(candidates))
    rows.append(
        (
            "uncertainty",
            len(candidates),
            seconds,
            peak,
            f"{len(candidates) * cfg.uncertainty_views / seconds:,.0f} views/s",
        )
    )

    print(f"\n{'phase':<16} {'images':>8} {'seconds':>8} {'images/s':>10}  {'peak memory':>16}")
    for name, n, s, peak, extra in rows:
        print(f"{name:<16} {n:>8,} {s:>8.2f} {n / s:>10,.1f}  {peak:>8.2f} {memory_unit(device):<7}  {extra}")
    if args.json:
        files = sorted(
            (args.root or default_root()).glob(
                f"{'imagenet' if args.dataset == 'imagenet' else 'tiny-imagenet-200'}/train/*/*"
            )
        )[:200]
        args.json.write_text(
            json.dumps(
                {
                    "workload": {
                        "dataset": args.dataset,
                        "synthetic": args.synthetic,
                        "size": args.size,
                        "batch": args.batch,
                        "views": cfg.uncertainty_views,
                        "decode": "nvjpeg" if source.decodes_on_gpu else "cpu",
                        "workers": source.workers,
                        "accel": rm.accel.describe(),
                        "mean_file_kb": sum(f.stat().st_size for f in files) / max(1, len(files)) / 1024,
                    },
                    "phases": {
                        name: {"images": n, "seconds": sec, "images_per_s": n / sec, "peak_gib": peak}
                        for name, n, sec, peak, _ in rows
                    },
                },
                indent=1,
            )
        )
    source.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
