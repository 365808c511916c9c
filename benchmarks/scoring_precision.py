"""How much MIR's choice of memory samples depends on the precision its candidates are scored in:
the share of each retrieval's top k that float32 scoring and autocast scoring (bf16, fp16) pick alike.

    python benchmarks/scoring_precision.py [--model resnet18] [--samples 260] [--dtypes bfloat16,float16]

Why. MIR scores candidates by their loss rise under a virtual SGD step, and CLIB its memory by
loss decreases: small differences of losses. The authors' code runs those forwards under fp16
autocast when AMP is on; rmconsole runs them in float32 even under `amp = bf16` (bf16 keeps 8
bits of mantissa to fp16's 11). This measures what bf16 would change: each retrieval of a digits
stream (i-Blurry, the digits preset's settings) is scored both ways on the same model and draw.
On CPU (autocast runs on CPU too); the choices, not the time, are the measure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import torch

from rmconsole.cl.data import load_digits
from rmconsole.cl.events import Reporter
from rmconsole.cl.learner import Setup, Task
from rmconsole.cl.methods import method_class
from rmconsole.cl.methods.mir import MIR
from rmconsole.cl.online import build_online_protocol, feed
from rmconsole.cl.resume import make_augmenter
from rmconsole.config import load_config


def overlaps(model: str, samples: int, dtype: torch.dtype, candidates: int, memory: int) -> list[float]:
    """Per retrieval: the share of the float32 top k that scoring under `dtype` autocast picks too."""
    shares: list[float] = []
    plain = MIR.scores_order

    def both(self: MIR, x_s, y_s, images_c, y_c, lr, k):  # type: ignore[no-untyped-def]
        state = {n: t.clone() for n, t in self.model.state_dict().items()}
        with torch.autocast("cpu", dtype=dtype):
            low = plain(self, x_s, y_s, images_c, y_c, lr, k)
        self.model.load_state_dict(state)  # (the look-ahead may move batch-norm statistics)
        full = plain(self, x_s, y_s, images_c, y_c, lr, k)
        shares.append(len(set(low.tolist()) & set(full.tolist())) / k)
        return full

    over = {"method": "mir", "model": model, "mir_candidates": candidates, "memory_size": memory, "device": "cpu"}
    _, cfg = load_config("digits-iblurry50-10", over)
    data = load_digits()
    protocol = build_online_protocol(cfg, data)
    device = torch.device("cpu")
    setup = Setup(
        cfg, data, protocol.train_labels, protocol.test_labels, protocol.groups, device,
        make_augmenter(cfg, data, device), Reporter(),
    )  # fmt: skip
    torch.manual_seed(cfg.seed)
    learner: Any = method_class("mir")(setup)  # (a task-free method)
    learner.online_start()
    MIR.scores_order = both  # type: ignore[method-assign]
    try:
        for t, part in enumerate(protocol.tasks):
            learner.online_task_start(Task(t, part, len(protocol.tasks)))
            for index, label in zip(part.tolist(), protocol.train_labels[part].tolist()):
                feed(learner, index, label)
                samples -= 1
                if samples == 0:
                    return shares
            learner.online_task_end(Task(t, part, len(protocol.tasks)))
    finally:
        MIR.scores_order = plain  # type: ignore[method-assign]
    return shares


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--samples", type=int, default=260, help="stream samples (a retrieval each once the memory fills)")
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--candidates", type=int, default=24)
    ap.add_argument("--memory", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    for name in args.dtypes.split(","):
        shares = overlaps(args.model, args.samples, getattr(torch, name), args.candidates, args.memory)
        if not shares:
            print(f"{name}: no retrieval in {args.samples} samples")
            continue
        print(
            f"{name} against float32, {args.model}: {len(shares)} retrievals, top-k picked alike "
            f"{statistics.mean(shares):.1%} (second half {statistics.mean(shares[len(shares) // 2 :]):.1%}, "
            f"lowest {min(shares):.0%})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
