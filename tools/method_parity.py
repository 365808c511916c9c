"""Every registered method's digits run through `rmconsole run`, per-task accuracies as JSON:
the before/after check of a refactor (run it on two checkouts, same machine, then `--compare`).

    python tools/method_parity.py OUT.json            # this checkout (PYTHONPATH or installed)
    python tools/method_parity.py --compare A.json B.json

Task-based methods run the digits preset with epochs=8; task-free ones an i-Blurry-50-10 digits
stream (the MNIST i-Blurry preset's settings on digits, K=200). One thread each, a store of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TASK = ["rm", "finetune", "er", "ewc", "rwalk", "icarl", "gdumb", "bic", "bic_star", "joint"]
TASK_FREE = ["rm", "er", "gdumb", "bic", "bic_star", "ewcpp", "mir", "er_ace", "scr", "clib"]
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


def main() -> None:
    if sys.argv[1] == "--compare":
        a, b = (json.loads(Path(p).read_text()) for p in sys.argv[2:4])
        same = 0
        for key in sorted(set(a) | set(b)):
            ok = a.get(key) == b.get(key)
            same += ok
            print(f"{'same' if ok else 'DIFFERS':8} {key}" + ("" if ok else f"\n   {a.get(key)}\n   {b.get(key)}"))
        print(f"{same} of {len(set(a) | set(b))} identical")
        sys.exit(0 if same == len(set(a) | set(b)) else 1)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as home:
        preset = Path(home) / "digits-iblurry.toml"
        preset.write_text(IBLURRY)
        for method in TASK:
            out[f"task:{method}"] = run(home, ["--set", f"method={method}", "--set", "epochs=8"])
            print(method, out[f"task:{method}"].get("tasks") or out[f"task:{method}"], flush=True)
        for method in TASK_FREE:
            out[f"task-free:{method}"] = run(home, ["--preset", str(preset), "--set", f"method={method}"])
            print(method, out[f"task-free:{method}"].get("metrics") or out[f"task-free:{method}"], flush=True)
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
