"""An offline install for a node with no package index: a folder of wheels, built where pip works.

    python -m rmconsole.wheelhouse wheelhouse/ --python 3.12 --extras test
    # on the node (its image brings torch and torchvision):
    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-index --find-links wheelhouse/ 'rmconsole[test]'

GPU and cluster images bring their own torch built for their CUDA; shipping another one would
be gigabytes and could break it, so torch and torchvision (and whatever only they need) are
left out by default. `--skip-from FREEZE` leaves out everything a `pip freeze` of the node's
environment already holds, which keeps the folder small. The script runs with the standard
library and pip alone (`python rmconsole/wheelhouse.py ...` works from a bare checkout).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ALWAYS_SKIPPED = ("torch", "torchvision", "torchaudio", "triton")
MANYLINUX = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014", "manylinux1")


def canonical(name: str) -> str:
    """PEP 503 name: `Typing_Extensions` and `typing-extensions` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.split(r"[\s<>=!~;\[(@]", requirement.strip(), maxsplit=1)[0])


def wheel_name(path: Path) -> str:
    """The project a wheel file belongs to (`sqlmodel-0.0.22-py3-none-any.whl` -> sqlmodel)."""
    return canonical(path.name.split("-", 1)[0])


def project_requirements(project: Path, extras: list[str]) -> tuple[str, list[str]]:
    """(project name, its runtime requirements plus the chosen extras') from pyproject.toml."""
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    optional = meta.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(
            f"error: unknown extra {unknown[0]!r}; this project has: {', '.join(sorted(optional)) or 'none'}"
        )
    reqs = list(meta.get("dependencies", []))
    for extra in extras:
        reqs += optional[extra]
    return meta["name"], reqs


def frozen_names(path: Path) -> set[str]:
    """Project names in a `pip freeze` / `pip list --format=freeze` file."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "-")):
            names.add(requirement_name(line))
    return names


def platforms(arch: str, given: list[str]) -> list[str]:
    return given or [f"{tag}_{arch}" for tag in MANYLINUX]


def build(
    out: Path, project: Path, python: str, arch: str, given_platforms: list[str], extras: list[str], skip: set[str]
) -> list[Path]:
    """Download every needed wheel for the target, build the project's own, drop the skipped."""
    name, reqs = project_requirements(project, extras)
    wanted = [r for r in reqs if requirement_name(r) not in skip]
    out.mkdir(parents=True, exist_ok=True)
    target = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for plat in platforms(arch, given_platforms):
        target += ["--platform", plat]
    pip = [sys.executable, "-m", "pip"]
    if wanted:
        subprocess.run([*pip, "download", "--dest", str(out), *target, *wanted], check=True)
    subprocess.run([*pip, "wheel", "--no-deps", "--wheel-dir", str(out), str(project)], check=True)
    for wheel in out.glob("*.whl"):
        if wheel_name(wheel) in skip:
            wheel.unlink()
    return sorted(out.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder to fill with wheels")
    parser.add_argument(
        "--python",
        default=f"{sys.version_info.major}.{sys.version_info.minor}",
        help="the node's Python version, e.g. 3.12 (default: this one)",
    )
    parser.add_argument("--arch", default="x86_64", help="the node's machine: x86_64 or aarch64")
    parser.add_argument(
        "--platform",
        action="append",
        default=[],
        help="pip platform tag(s) of the node (default: manylinux 2014..2_28 for --arch)",
    )
    parser.add_argument("--extras", default="", help="comma-separated extras to include, e.g. test,postgres")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        help="a project the node already has (repeatable); torch and torchvision always",
    )
    parser.add_argument("--skip-from", type=Path, help="a `pip freeze` of the node: leave out all it holds")
    parser.add_argument(
        "--project",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the project to package (default: this checkout)",
    )
    args = parser.parse_args(argv)
    if not (args.project / "pyproject.toml").is_file():
        print(f"error: no pyproject.toml in {args.project}; give the checkout with --project", file=sys.stderr)
        return 2
    skip = {canonical(s) for s in (*ALWAYS_SKIPPED, *args.skip)}
    if args.skip_from is not None:
        try:
            skip |= frozen_names(args.skip_from)
        except OSError as err:
            print(f"error: cannot read --skip-from {str(args.skip_from)!r}: {err.strerror}", file=sys.stderr)
            return 2
    extras = [e.strip() for e in args.extras.split(",") if e.strip()]
    try:
        wheels = build(args.out, args.project, args.python, args.arch, args.platform, extras, skip)
    except subprocess.CalledProcessError as err:
        print(f"error: pip failed (exit {err.returncode}); its output is above", file=sys.stderr)
        return 1
    size = sum(w.stat().st_size for w in wheels) / 2**20
    spec = "rmconsole" + (f"[{','.join(extras)}]" if extras else "")
    print(f"{len(wheels)} wheels, {size:.1f} MiB in {args.out}; left out: {', '.join(sorted(skip))}")
    print("install on the node (its own torch and torchvision stay):")
    print("  python3 -m venv --system-site-packages .venv")
    print(f"  .venv/bin/pip install --no-index --find-links {args.out} '{spec}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
