"""What one task-free update costs: operator calls (on a GPU, about one kernel launch each) and
milliseconds, per method, at a preset's model, image size and batch.

    python benchmarks/online_step_ops.py --methods er,clib                    # CPU: counts, slow steps
    python benchmarks/online_step_ops.py --device cuda --samples 960           # a GPU: ms per update

Task-free steps run eager (no CUDA graphs), so on a GPU a small model's update is bound by how
fast the host issues operators, not by the GPU: the operator count per update, times the
framework's cost per operator, is the floor. Synthetic images of the preset's shape (no dataset
needed); the stream is the preset's first task on them, `online_iter` updates per sample.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from common import sync

from rmconsole.cl.data import Dataset, TensorImages
from rmconsole.cl.events import Reporter
from rmconsole.cl.learner import Setup, Task
from rmconsole.cl.methods import method_class
from rmconsole.cl.online import build_online_protocol
from rmconsole.cl.resume import make_augmenter
from rmconsole.config import load_config

# operators that launch no kernel: views, allocations, metadata (counted apart)
NO_KERNEL = {
    "aten::" + n
    for n in [
        "detach",
        "empty",
        "empty_like",
        "empty_strided",
        "view",
        "reshape",
        "_reshape_alias",
        "slice",
        "select",
        "expand",
        "t",
        "transpose",
        "as_strided",
        "alias",
        "unsqueeze",
        "squeeze",
        "permute",
        "lift_fresh",
        "to",
        "_to_copy_noop",
        "resolve_conj",
        "resolve_neg",
        "unbind",
        "split",
        "chunk",
        "narrow",
        "flatten",
        "unflatten",
        "contiguous_noop",
        "result_type",
        "size",
        "stride",
        "numel",
    ]
}


def synthetic(n_classes: int, size: int, per_class: int, test_per_class: int) -> Dataset:
    gen = torch.Generator().manual_seed(0)

    def split(k: int) -> TensorImages:
        labels = torch.arange(n_classes).repeat_interleave(k)
        images = torch.randint(0, 256, (len(labels), 3, size, size), generator=gen, dtype=torch.uint8)
        return TensorImages(images, labels)

    names = [f"c{i}" for i in range(n_classes)]
    return Dataset("synthetic", split(per_class), split(test_per_class), names, (0.5,) * 3, (0.5,) * 3)


def measure(preset: str, method: str, samples: int, device: torch.device, profiled: bool = True) -> dict:
    _, cfg = load_config(preset, {"method": method, "device": str(device)})
    data = synthetic(200, cfg.image_size or 64, 100, 2).to(device)
    protocol = build_online_protocol(cfg, data)
    train_labels, test_labels = protocol.train_labels.to(device), protocol.test_labels.to(device)
    augmenter = make_augmenter(cfg, data, device)
    setup = Setup(cfg, data, train_labels, test_labels, protocol.groups, device, augmenter, Reporter())
    learner = method_class(cfg.method_spec)(setup)
    learner.online_start()
    task = Task(0, protocol.tasks[0], len(protocol.tasks))
    learner.online_task_start(task)
    stream = task.stream.tolist()
    labels = protocol.train_labels[task.stream].tolist()

    def feed(lo: int, hi: int) -> None:
        for index, label in zip(stream[lo:hi], labels[lo:hi]):
            if not bool(learner.seen[label]):
                learner.online_new_class(label)
            learner.online_observe(index, label)

    chunk = max(1, cfg.batch_size // 2)  # updates come when this many stream samples are in
    samples = max(chunk, samples // chunk * chunk)
    warm = 4 * chunk
    feed(0, warm)  # the memory fills, the first updates allocate
    sync(device)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) if profiled else contextlib.nullcontext() as prof:
        feed(warm, warm + samples)
        sync(device)

    def top_level(event: object) -> bool:
        """An operator the host issued itself, not one called inside another operator."""
        parent = getattr(event, "cpu_parent", None)
        while parent is not None:
            if parent.name.startswith("aten::"):
                return False
            parent = parent.cpu_parent
        return True

    events = prof.events() if profiled else []
    ops = Counter(e.name for e in events if e.name.startswith("aten::") and top_level(e))
    launching = Counter({name: n for name, n in ops.items() if name not in NO_KERNEL})
    sync(device)
    started = time.perf_counter()
    feed(warm + samples, warm + 2 * samples)
    sync(device)
    seconds = time.perf_counter() - started
    updates = samples * cfg.online_iter
    return {
        "method": method,
        "updates": updates,
        "ms_per_update": 1000 * seconds / updates,
        "ops_per_update": sum(ops.values()) / updates if profiled else None,
        "kernel_ops_per_update": sum(launching.values()) / updates if profiled else None,
        "top_ops": launching.most_common(5),
        "model": cfg.model,
        "image_size": cfg.image_size,
        "batch_size": cfg.batch_size,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--preset", default="tiny-imagenet-iblurry50-10")
    ap.add_argument("--methods", default="er,clib")
    ap.add_argument("--samples", type=int, default=32, help="stream samples profiled, then as many timed")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--time-only", action="store_true", help="no profiler: milliseconds an update only (a GPU check)")
    ap.add_argument("--jsonl", type=Path, default=None, help="append each method's row to this file as it ends")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    print(f"{args.preset} on {device}, {args.threads} CPU thread(s)")
    print("method | updates timed | ms/update | operators/update (of which may launch kernels) | most called of those")
    failed = 0
    for method in args.methods.split(","):
        try:
            r = measure(args.preset, method, args.samples, device, profiled=not args.time_only)
        except Exception as err:  # noqa: BLE001 - one method's failure is its row; the others still run
            failed += 1
            r = {"method": method, "error": f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"}
            print(f"{method} | failed: {r['error']}", flush=True)
        else:
            common = ", ".join(f"{name.removeprefix('aten::')} {n}" for name, n in r["top_ops"])
            ops = (
                "not profiled"
                if r["ops_per_update"] is None
                else (f"{r['ops_per_update']:.0f} ({r['kernel_ops_per_update']:.0f}) | {common}")
            )
            print(
                f"{method} | {r['updates']:g} | {r['ms_per_update']:.1f} | {ops}"
                f"  ({r['model']} at {r['image_size']}, batch {r['batch_size']})",
                flush=True,
            )
        if args.jsonl is not None:
            with args.jsonl.open("a") as out:
                out.write(json.dumps({**r, "device": str(device)}) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
