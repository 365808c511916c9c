"""Every registered method's digits run through `rmconsole run`, per-task accuracies as JSON:
the before/after check of a refactor (run it on two checkouts, same machine, then `--compare`).

    python tools/method_parity.py OUT.json            # this checkout (PYTHONPATH or installed)
    python tools/method_parity.py --compare A.json B.json
    python tools/method_parity.py OUT.json --seeds 1,2,3 --methods task-free:clib,task:rm
                                                      # keys KIND:METHOD@seedS, those methods only

Task-based methods run the digits preset with epochs=8; task-free ones an i-Blurry-50-10 digits
stream (the MNIST i-Blurry preset's settings on digits, K=200). One thread each, a store of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TASK = ["rm", "finetune", "er", "ewc", "rwalk", "icarl", "gdumb", "bic", "bic_star", "joint"]
TASK_FREE = [
    "rm",
    "er",
    "gdumb",
    "bic",
    "bic_star",
    "ewcpp",
    "mir",
    "er_ace",
    "scr",
    "clib",
    "pcr",
    "gsa",
    "ocm",
    "onpro",
]
IBLURRY = """dataset = "digits"
model = "mlp400"
method = "er"
memory_size = 200
n_tasks = 5
stream = "iblurry"
disjoint_classes = 50
blurry = 10
online_iter = 1
batch_size = 16
eval_period = 100
augment = ["cutmix"]
optimizer = "adam"
lr = 0.0003
weight_decay = 0.0
schedule = "exp_reset"

[methods.rm]
optimizer = "sgd"
lr = 0.05
weight_decay = 1e-4
schedule = "constant"
epochs = 4

[methods.gdumb]
optimizer = "sgd"
lr = 0.05
weight_decay = 1e-4
schedule = "constant"
epochs = 4
"""


def run(home: str, args: list[str]) -> dict:
    env = {**os.environ, "RMCONSOLE_HOME": home, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["rmconsole", "run", *args, "--set", "threads=1"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    show = subprocess.run(["rmconsole", "show", "last", "--json"], env=env, capture_output=True, text=True, check=True)
    detail = json.loads(show.stdout)
    return {
        "tasks": [t.get("accuracy") for t in detail["tasks"]],
        "rows": [t.get("accuracy_row") for t in detail["tasks"]],
        "anytime": [a.get("accuracy") for a in detail.get("anytime") or []],
        "metrics": {
            k: v for k, v in (detail.get("metrics") or {}).items() if k in ("A_last", "A_avg", "F_last", "A_auc")
        },
    }


def _spread(side: dict, key: str) -> str:
    """A_last (task-free) or the last task's accuracy (task-based) over a key's seeds: mean ± std (n)."""
    runs = [v for k, v in side.items() if k.split("@")[0] == key and "error" not in v]
    finals = [r["metrics"]["A_last"] if key.startswith("task-free:") else r["tasks"][-1] for r in runs]
    if not finals:
        return "no runs"
    return (
        f"{statistics.mean(finals):.2f} ± {statistics.stdev(finals) if len(finals) > 1 else 0.0:.2f} (n={len(finals)})"
    )


def main() -> None:
    if sys.argv[1] == "--compare":
        a, b = (json.loads(Path(p).read_text()) for p in sys.argv[2:4])
        same = 0
        for key in sorted(set(a) | set(b)):
            ok = a.get(key) == b.get(key)
            same += ok
            print(f"{'same' if ok else 'DIFFERS':8} {key}" + ("" if ok else f"\n   {a.get(key)}\n   {b.get(key)}"))
        print(f"{same} of {len(set(a) | set(b))} identical")
        seeded = sorted({k.split("@")[0] for k in set(a) | set(b) if "@seed" in k})
        for key in seeded:  # --seeds runs: the final accuracy's mean and std over seeds, per side
            print(f"{key}: " + "  vs  ".join(_spread(side, key) for side in (a, b)))
        sys.exit(0 if same == len(set(a) | set(b)) else 1)
    ap = argparse.ArgumentParser(description="every method's digits run, per-task accuracies as JSON")
    ap.add_argument("out", type=Path)
    ap.add_argument("--seeds", default=None, help="comma-separated seeds: one run each, keys KIND:METHOD@seedS")
    ap.add_argument("--methods", default=None, help="comma-separated KIND:METHOD keys (default: all)")
    args = ap.parse_args()
    keys = [f"task:{m}" for m in TASK] + [f"task-free:{m}" for m in TASK_FREE]
    if args.methods:
        wanted = args.methods.split(",")
        unknown = [k for k in wanted if k not in keys]
        if unknown:
            sys.exit(f"method_parity: unknown --methods {','.join(unknown)} (allowed: {','.join(keys)})")
        keys = wanted
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [None]
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as home:
        preset = Path(home) / "digits-iblurry.toml"
        preset.write_text(IBLURRY)
        for key in keys:
            kind, method = key.split(":")
            for seed in seeds:
                extra = ["--set", f"seed={seed}"] if seed is not None else []
                if kind == "task":
                    args_ = ["--set", f"method={method}", "--set", "epochs=8", *extra]
                else:
                    args_ = ["--preset", str(preset), "--set", f"method={method}", *extra]
                name = key if seed is None else f"{key}@seed{seed}"
                out[name] = run(home, args_)
                shown = out[name].get("tasks" if kind == "task" else "metrics") or out[name]
                print(method if seed is None else name, shown, flush=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
