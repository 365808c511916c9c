"""Mutation testing of the science core: `python tools/mutation.py [--max-children N] [--report-only]`.

Runs mutmut (the optional extra `mutation`: `pip install -e '.[mutation]'`) over the modules
named in pyproject.toml's [tool.mutmut] (cl/streams.py, memory.py, uncertainty.py, metrics.py,
schedule.py) against the tests that pin them, then prints the score:

    killed / (total - judged equivalent), with the survivors listed

A mutant is killed when a test fails (or times out / crashes) with it in place; "no tests" and
"survived" both count against the score. Mutants judged equivalent (no test can tell them
apart: same behaviour on every input the code can receive) are listed with the reason in
tools/mutation_equivalent.toml and left out of the denominator. Not part of the default test
run: it takes tens of minutes on one core (mutmut forks one process per mutant).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KILLED = {1: "killed", 3: "killed", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout",
          -11: "segfault", -9: "segfault", 37: "caught by type check"}
STATUS = {0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", None: "not checked", 2: "interrupted"}


def results() -> dict[str, str]:
    """mutant name -> status, from mutmut's per-module records under mutants/."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    out: dict[str, str] = {}
    for module in config["only_mutate"]:
        meta = REPO / "mutants" / f"{module}.meta"
        if not meta.exists():
            continue
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            out[name] = "killed" if code in KILLED else STATUS.get(code, "suspicious")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--report-only", action="store_true", help="print the score of the last run")
    args = parser.parse_args()
    if not args.report_only:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.setdefault("RMCONSOLE_TEST_DATA", str(REPO.parent / "shared" / "data"))
        env.pop("PYTHONPATH", None)  # the mutated copy under mutants/ must be what the tests import
        mutmut = Path(sys.executable).with_name("mutmut")
        code = subprocess.run([str(mutmut), "run", "--max-children", str(args.max_children)], cwd=REPO, env=env).returncode
        if code not in (0, 1):
            print(f"mutmut run exited {code}", file=sys.stderr)
            return code
    status = results()
    if not status:
        print("no mutmut results under mutants/: run without --report-only first", file=sys.stderr)
        return 2
    equivalent = tomllib.loads((REPO / "tools" / "mutation_equivalent.toml").read_text()).get("equivalent", {})
    unknown = sorted(set(equivalent) - set(status))
    counts = Counter(status.values())
    judged = [name for name in equivalent if status.get(name) not in (None, "killed")]
    total = len(status)
    killed = counts["killed"]
    denominator = total - len(judged)
    by_module = Counter(name.rsplit(".", 1)[0].rsplit(".x_", 1)[0] for name in status)
    print("mutants per module: " + ", ".join(f"{m}: {n}" for m, n in sorted(by_module.items())))
    print("status: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    print(f"judged equivalent: {len(judged)} (tools/mutation_equivalent.toml)")
    for name in judged:
        print(f"  {name}: {equivalent[name]}")
    survivors = sorted(n for n, s in status.items() if s != "killed" and n not in equivalent)
    print(f"not killed and not judged equivalent: {len(survivors)}")
    for name in survivors:
        print(f"  {name} ({status[name]})")
    if unknown:
        print(f"(equivalence notes for mutants that no longer exist: {', '.join(unknown)})")
    score = killed / denominator if denominator else 0.0
    print(f"mutation score: {killed} killed / {denominator} non-equivalent = {100 * score:.1f}% "
          f"({total} mutants, {len(judged)} judged equivalent)")
    return 0 if score >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
