"""What anytime evaluation costs: evaluations per second, and its share of a task-free run's wall time.

    RMCONSOLE_DATA=../shared/data PYTHONPATH=. python benchmarks/anytime_eval_cost.py \\
        [--tasks 1] [--eval-period 100] [--png benchmarks/results/anytime_eval_cost.png]

1. Throughput: `inference.evaluate` (the driver's evaluation: the test samples of the classes
   seen so far, batched, on the device) of an MLP400 on MNIST, for 1..10 classes seen: seconds
   per evaluation, evaluations/s and test images/s (median of repeats, after a warm-up).
2. Share: the follow-up's ER on MNIST i-Blurry-50-10 (preset mnist-iblurry50-10: online_iter 1,
   batch 16, CutMix + AutoAugment, anytime evaluation every `--eval-period` samples) over the
   first `--tasks` tasks, timed by the driver itself (training vs evaluation seconds).
Pin one thread (OMP_NUM_THREADS=1) and state the load (`uptime`): the figures scale with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch


def throughput(repeats: int = 5) -> list[dict]:
    from rmconsole.cl.data import load_run_dataset
    from rmconsole.cl.inference import evaluate
    from rmconsole.cl.methods import Setup, method_class
    from rmconsole.cl.online import build_online_protocol
    from rmconsole.cl.resume import make_augmenter
    from rmconsole.config import load_config

    _, cfg = load_config("mnist-iblurry50-10", {"threads": 1})
    data, cpu = load_run_dataset(cfg), torch.device("cpu")
    proto = build_online_protocol(cfg, data)
    aug = make_augmenter(cfg, data, cpu)
    method = method_class("er")(Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, aug))
    method.online_start()
    method.seen[:] = True
    rows = []
    for k in range(1, 11):
        classes = list(range(k))
        n = int(torch.isin(proto.test_labels, torch.tensor(classes)).sum())
        evaluate(method, data, proto.test_labels, classes, aug)  # warm-up
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            evaluate(method, data, proto.test_labels, classes, aug)
            times.append(time.perf_counter() - t)
        s = statistics.median(times)
        rows.append({"classes": k, "test_images": n, "seconds": s, "evaluations_per_s": 1 / s, "images_per_s": n / s})
    return rows


def share(tasks: int, eval_period: int) -> dict:
    from rmconsole.cl import online
    from rmconsole.cl.data import load_run_dataset
    from rmconsole.cl.events import Reporter
    from rmconsole.config import load_config

    _, cfg = load_config("mnist-iblurry50-10", {"threads": 1, "eval_period": eval_period})
    data = load_run_dataset(cfg)
    build = online.build_online_protocol

    def first_tasks(c, d):  # the same stream, cut to its first `tasks` tasks
        p = build(c, d)
        p.tasks, p.groups, p.first = p.tasks[:tasks], p.groups[:tasks], p.first[:tasks]
        return p

    online.build_online_protocol = first_tasks
    try:
        started = time.perf_counter()
        outcomes = online.run_online(cfg, data, torch.device("cpu"), Reporter())
        wall = time.perf_counter() - started
    finally:
        online.build_online_protocol = build
    o = outcomes[-1].extra["online"]
    return {
        "samples": o["samples_seen"],
        "evaluations": o["evaluations"],
        "train_seconds": o["train_seconds"],
        "eval_seconds": o["eval_seconds"],
        "wall_seconds": round(wall, 1),
        "eval_share": o["eval_seconds"] / (o["train_seconds"] + o["eval_seconds"]),
        "evaluations_per_s": o["evaluations_per_s"],
        "train_samples_per_s": o["train_samples_per_s"],
        "A_auc": o["A_auc"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1)
    ap.add_argument("--eval-period", type=int, default=100)
    ap.add_argument("--png", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"load: {os.getloadavg()[0]:.1f} (1 min), threads 1, torch {torch.__version__}")
    rows = throughput()
    print("classes  test images  s/evaluation  evaluations/s  images/s")
    for r in rows:
        print(
            f"{r['classes']:>7} {r['test_images']:>12} {r['seconds']:>13.4f} {r['evaluations_per_s']:>14.1f} "
            f"{r['images_per_s']:>9.0f}"
        )
    s = share(args.tasks, args.eval_period)
    print(
        f"ER, MNIST i-Blurry-50-10, first {args.tasks} task(s), eval_period {args.eval_period}: {s['samples']} samples, "
        f"{s['evaluations']} evaluations; train {s['train_seconds']:.1f} s ({s['train_samples_per_s']} samples/s), "
        f"evaluation {s['eval_seconds']:.1f} s ({s['evaluations_per_s']} evaluations/s) = "
        f"{100 * s['eval_share']:.1f}% of the two; wall {s['wall_seconds']} s; A_auc {s['A_auc']:.2f}"
    )
    print(f"load after: {os.getloadavg()[0]:.1f}")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        ax.plot([r["test_images"] for r in rows], [r["evaluations_per_s"] for r in rows], marker="o")
        for r in rows:
            ax.annotate(
                f"{r['classes']} cls",
                (r["test_images"], r["evaluations_per_s"]),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, 3),
            )
        ax.set_xlabel("test images evaluated (classes seen so far)")
        ax.set_ylabel("evaluations / s")
        ax.set_title(
            f"anytime evaluation, MLP400 on MNIST, 1 CPU thread (load {os.getloadavg()[0]:.0f} on 2 cores)\n"
            f"ER run: evaluation = {100 * s['eval_share']:.0f}% of train+eval time at eval_period "
            f"{args.eval_period}",
            fontsize=9,
        )
        ax.grid(alpha=0.3)
        fig.tight_layout()
        args.png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.png, dpi=150)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
