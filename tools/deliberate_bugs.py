"""Put each of issue 13's five deliberate bugs (and issue 29's four) into a copy of the package and show that the test
suite's science tests catch it (each must make at least one test fail).

    python tools/deliberate_bugs.py            # all nine; exit 1 if one is not caught

Each bug is a textual patch of one module; the copy lives in a temporary directory, so the
checkout is never touched. Runs only the test files that pin the science (about a minute each
on one core).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = [
    "tests/cl/test_known_science_bugs.py",
    "tests/cl/test_memory.py",
    "tests/cl/test_metrics_schedule.py",
    "tests/cl/test_uncertainty.py",
    "tests/cl/test_streams.py",
    "tests/cl/test_taskfree_driver_and_anytime.py",
    "tests/cl/test_method_update_rules.py",
]

BUGS = {
    "the clean image votes as view 0": (
        "rmconsole/cl/uncertainty.py",
        (
            "        views = perturbed_views(images, measure, n_views, gen)\n",
            "        views = perturbed_views(images, measure, n_views, gen)\n        views[0] = images\n",
        ),
    ),
    "model.train() during uncertainty scoring": (
        "rmconsole/cl/inference.py",
        (
            '    `progress(n)`: n more of `idx` scored (with several ranks, counted for all of them)."""\n'
            "    method.model.eval()\n",
            '    `progress(n)`: n more of `idx` scored (with several ranks, counted for all of them)."""\n'
            "    method.model.train()\n",
        ),
    ),
    "herding replaced by random picks after the first": (
        "rmconsole/cl/memory.py",
        (
            "        i = int(dist.argmin())\n",
            "        i = int(dist.argmin()) if j == 0 else int(available.nonzero()[torch.randint(int(available.sum()), (1,))])\n",
        ),
    ),
    "F_last as max over k >= j clamped at 0": (
        "rmconsole/cl/metrics.py",
        (
            "        before = [matrix[k][j] for k in range(last) if matrix[k][j] is not None]\n"
            "        if before and matrix[last][j] is not None:\n"
            "            drops.append(max(before) - matrix[last][j])\n",
            "        before = [matrix[k][j] for k in range(j, len(matrix)) if matrix[k][j] is not None]\n"
            "        if before and matrix[last][j] is not None:\n"
            "            drops.append(max(0.0, max(before) - matrix[last][j]))\n",
        ),
    ),
    "per-sample instead of per-class averaging in a task's accuracy": (
        "rmconsole/cl/loop.py",
        (
            "                accuracy_row=metrics.task_accuracy_row(result.class_accuracy, protocol.groups),\n",
            "                accuracy_row=[sum(result.class_accuracy[c] * n[c] for c in g) / sum(n[c] for c in g)\n"
            "                              for n in [torch.bincount(test_labels.cpu(), minlength=data.n_classes).tolist()]\n"
            "                              for g in protocol.groups],\n",
        ),
    ),
    # issue 29: each caught by a named test (test_taskfree_driver_and_anytime.py, test_method_update_rules.py)
    "anytime evaluation scores every class, unseen ones included": (
        "rmconsole/cl/online.py",
        (
            "acc, class_acc = evaluate(method, data, test_labels, list(range(clock.exposed)), augmenter)",
            "acc, class_acc = evaluate(method, data, test_labels, list(range(data.n_classes)), augmenter)",
        ),
    ),
    "A_auc weighted by the classes each point covers": (
        "rmconsole/cl/metric_catalog.py",
        (
            "    return MA.area_under_curve(p.accuracy for p in rows.anytime)",
            "    return sum(p.accuracy * p.n_classes for p in rows.anytime) / sum(p.n_classes for p in rows.anytime) "
            "if rows.anytime else None",
        ),
    ),
    "proximal step size lr, momentum ignored": (
        "rmconsole/cl/methods/quadratic.py",
        (
            'self.quadratic.proximal_step(lr / (1.0 - float(group.get("momentum", 0.0))))',
            "self.quadratic.proximal_step(lr)",
        ),
    ),
    "EWC++ running average the other way round": (
        "rmconsole/cl/methods/ewcpp.py",
        ("f.mul_(1 - alpha).add_(p.grad.pow(2), alpha=alpha)", "f.mul_(alpha).add_(p.grad.pow(2), alpha=1 - alpha)"),
    ),
}


def main() -> int:
    python = sys.executable
    missed = []
    for name, (module, (old, new)) in BUGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "repo"
            shutil.copytree(
                REPO,
                copy,
                ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "mutants", ".rmconsole", "*.egg-info"),
            )
            path = copy / module
            text = path.read_text()
            if text.count(old) != 1:
                print(f"{name}: the patch no longer applies to {module}", flush=True)
                missed.append(name)
                continue
            path.write_text(text.replace(old, new))
            env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
            env.setdefault("RMCONSOLE_TEST_DATA", str(REPO.parent / "shared" / "data"))
            out = subprocess.run(
                [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *TESTS],
                cwd=copy,
                env=env,
                capture_output=True,
                text=True,
            )
            failed = [line.split(" ")[1] for line in out.stdout.splitlines() if line.startswith("FAILED ")]
            verdict = (
                f"caught by {len(failed)} test(s): {', '.join(f.split('::')[-1] for f in failed)}"
                if failed
                else "NOT CAUGHT"
            )
            print(f"{name} ({module}): {verdict}", flush=True)
            if not failed:
                missed.append(name)
    print(f"{len(BUGS) - len(missed)}/{len(BUGS)} deliberate bugs caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
