#!/usr/bin/env python3
"""Move the test suite into folders by layer (issue 29, item 3), in one commit, with `git mv`.

    python3 tools/layout_tests.py            # show what it would do; change nothing
    python3 tools/layout_tests.py --apply    # do it (then run `pytest --collect-only -q`, commit)

What it does, from the files it finds at run time (not from a list frozen when it was written):

- every `tests/test_*.py` goes to the folder the table LAYOUT below gives it (`tests/cl`,
  `tests/store`, `tests/runner`, `tests/faces`, `tests/faults`, `tests/platform`), renamed where
  the table says (file names that were campaigns become names that say what they cover);
- the helpers (HELPERS) go to `tests/support/`, a package (`tests/support/__init__.py`);
- a renamed test file's snapshots (`tests/__snapshots__/<stem>/`) go along, to
  `tests/<folder>/__snapshots__/<new stem>/`, where pytest-textual-snapshot looks for them;
- imports are rewritten: `import tui_store` -> `from support import tui_store`,
  `from campaign import x` -> `from support.campaign import x`, `from test_old import x` ->
  `from test_new import x` (a test file may import another only from its own folder: pytest puts
  each test file's folder on sys.path; the script stops if a move would break that);
- paths are rewritten in every tracked text file (docs, pyproject, tools, the package's comments,
  the tests themselves; not benchmarks/results/, which are logs of past runs):
  `tests/test_old.py` -> `tests/<folder>/test_new.py`, `tests/helper.py` -> `tests/support/helper.py`,
  `tests/__snapshots__/<stem>/` -> its new place, and a renamed file's bare name `test_old.py`
  (the troubleshooting page's Faults table names tests that way) -> `test_new.py`;
- in the moved test files, `Path(__file__).resolve().parents[1]` (the checkout) becomes
  `parents[2]`, and `Path(__file__).with_name("<helper>.py")` points into support/.

A test file the table does not know: the script prints every such file with the line to add
to LAYOUT and stops before changing anything (exit 2). Add it to LAYOUT (one place), or give it
on the command line: `--map test_new_thing.py=store` or `--map test_x.py=faults/test_better_name.py`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
FOLDERS = ("cl", "store", "runner", "faces", "faults", "platform")

# file name today -> "folder" or "folder/new_name.py". Extend here for test files added later.
LAYOUT: dict[str, str] = {
    # cl: the science (rmconsole/cl: streams, memory, methods, metrics, training engine)
    "test_accel.py": "cl",
    "test_augment.py": "cl",
    "test_baselines.py": "cl",
    "test_datasets.py": "cl",
    "test_engine.py": "cl/test_engine_fast_paths.py",
    "test_epochs.py": "cl",
    "test_graphs.py": "cl/test_cuda_graph_step.py",
    "test_loop.py": "cl",
    "test_memory.py": "cl",
    "test_method_interface.py": "cl",
    "test_method_params.py": "cl",
    "test_metric_catalog.py": "cl",
    "test_metrics_schedule.py": "cl",
    "test_models.py": "cl",
    "test_mutation_pins.py": "cl/test_science_reference_values.py",
    "test_online.py": "cl/test_taskfree_protocol.py",
    "test_online_methods.py": "cl/test_taskfree_methods.py",
    "test_pipeline.py": "cl/test_image_pipeline.py",
    "test_rm_variants.py": "cl",
    "test_science_pins.py": "cl/test_known_science_bugs.py",
    "test_streams.py": "cl",
    "test_streams_iblurry.py": "cl",
    "test_uncertainty.py": "cl",
    "test_deviations.py": "cl/test_followup_deviations.py",
    "test_validation.py": "cl/test_validation_stream.py",
    "test_evaluate_test.py": "cl/test_runs_without_test_evaluation.py",
    "test_methods_science.py": "cl/test_method_update_rules.py",
    "test_online_science.py": "cl/test_taskfree_driver_and_anytime.py",
    "test_methods_survivors.py": "cl/test_method_state_and_schedules.py",
    # store: every SQL statement, both backends
    "test_concurrency.py": "store/test_concurrent_writers.py",
    "test_filters.py": "store/test_run_filters.py",
    "test_intransigence.py": "store/test_intransigence_upper_bound.py",
    "test_postgres.py": "store",
    "test_queries.py": "store",
    "test_store.py": "store",
    "test_transitions.py": "store/test_status_transitions.py",
    # runner: configs, processes, executors, sweeps, checkpoints
    "test_config.py": "runner",
    "test_config_keys.py": "runner",
    "test_distributed.py": "runner",
    "test_executors.py": "runner",
    "test_gpu.py": "runner",
    "test_resume.py": "runner/test_checkpoint_resume.py",
    "test_runner.py": "runner/test_process_facts.py",
    "test_runs_per_gpu.py": "runner",
    "test_slurm.py": "runner",
    "test_sweep.py": "runner/test_sweep_queue.py",
    "test_warm.py": "runner/test_warm_start.py",
    "test_tune.py": "runner",
    # faces: CLI, TUI, reports, exports
    "test_cli.py": "faces",
    "test_cli_identity.py": "faces",
    "test_export.py": "faces",
    "test_faces.py": "faces/test_cli_in_process.py",
    "test_paper_match.py": "faces",
    "test_numbers.py": "faces",
    "test_report.py": "faces",
    "test_serve.py": "faces/test_tui_serve.py",
    "test_sweep_cli.py": "faces",
    "test_tui.py": "faces",
    "test_tui_anytime.py": "faces",
    "test_tui_data.py": "faces",
    "test_tui_identity.py": "faces",
    "test_tui_issue27.py": "faces/test_tui_run_page.py",
    "test_tui_snapshots.py": "faces/test_tui_screens.py",
    # faults: bad input, killed processes, silent failures, safety (the troubleshooting page's tables)
    "test_bad_input.py": "faults",
    "test_campaign.py": "faults/test_troubleshooting_tables.py",
    "test_faults.py": "faults/test_killed_stopped_resumed.py",
    "test_nothing_silent.py": "faults/test_silent_failures.py",
    "test_safety.py": "faults/test_secrets_and_outages.py",
    # platform: plug-ins, scaffolding, examples, packaging, docs, benchmarks
    "test_benchmark.py": "platform",
    "test_conformance.py": "platform",
    "test_examples.py": "platform",
    "test_new.py": "platform/test_scaffold_new.py",
    "test_packaging.py": "platform",
    "test_plugins.py": "platform",
    "test_plugins_e2e.py": "platform/test_plugins_installed.py",
    "test_readme.py": "platform",
}

# the modules the tests import (and store_writer.py, which test_concurrency starts as a script)
HELPERS = ("campaign.py", "identity_store.py", "online_helpers.py", "plugin_venv.py", "store_writer.py",
           "tui_store.py")
STAYS = ("conftest.py",)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".sh", ".yml", ".yaml", ".tmpl", ""}
NOT_REWRITTEN = ("benchmarks/results/",)  # logs of past runs: they say what the paths were


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def plan(extra: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """{old path: new path} relative to the checkout, for tests and helpers; and the unknown files."""
    layout = {**LAYOUT, **extra}
    moves: dict[str, str] = {}
    unknown: list[str] = []
    for path in sorted(TESTS.glob("*.py")):
        name = path.name
        if name in STAYS:
            continue
        if name in HELPERS:
            moves[f"tests/{name}"] = f"tests/support/{name}"
        elif name in layout:
            target = layout[name]
            folder, _, new = target.partition("/")
            if folder not in FOLDERS or (new and not re.fullmatch(r"test_\w+\.py", new)):
                sys.exit(f"layout: {name} -> {target!r}: the folder must be one of {', '.join(FOLDERS)}, "
                         "the new name test_<words>.py")
            moves[f"tests/{name}"] = f"tests/{folder}/{new or name}"
        else:
            unknown.append(name)
    return moves, unknown


def check(moves: dict[str, str]) -> None:
    """Stop before anything changes where the result could not work."""
    names: dict[str, str] = {}
    for old, new in moves.items():
        base = Path(new).name
        if base in names:  # pytest's default import mode needs unique test file names
            sys.exit(f"layout: {old} and {names[base]} would both be named {base}")
        names[base] = old
        if (REPO / new).exists():
            sys.exit(f"layout: {new} exists already")


def cross_imports(moves: dict[str, str]) -> list[str]:
    """Test files that import from a test file going to another folder (`from test_tui import until`
    in a store test): pytest puts only a test file's own folder on sys.path, so conftest.py gets
    the layer folders on sys.path for them (SYS_PATH_BLOCK); moving those helpers into support/
    later removes the need."""
    stem_to_new = {Path(o).stem: n for o, n in moves.items() if Path(o).name.startswith("test_")}
    found = []
    for old, new in moves.items():
        if not Path(old).name.startswith("test_"):
            continue
        text = (REPO / old).read_text()
        for imported in re.findall(r"^\s*(?:from|import)\s+(test_\w+)", text, flags=re.MULTILINE):
            if imported in stem_to_new and Path(stem_to_new[imported]).parent != Path(new).parent:
                found.append(f"{new} imports {Path(stem_to_new[imported]).stem} ({stem_to_new[imported]})")
    return found


SYS_PATH_BLOCK = """

# Test files import helpers from test files of other layer folders (tools/layout_tests.py lists
# them); pytest puts only a test file's own folder on sys.path, so every layer folder goes there.
# Moving those helpers into tests/support/ makes this block unnecessary.
for _layer in ("cl", "store", "runner", "faces", "faults", "platform"):
    if str(Path(__file__).parent / _layer) not in sys.path:
        sys.path.append(str(Path(__file__).parent / _layer))
"""


def rewrite_text(text: str, moves: dict[str, str], python: bool, moved_test: bool) -> str:
    for old, new in moves.items():
        text = re.sub(rf"(?<![\w/.-]){re.escape(old)}\b", new, text)  # tests/test_x.py, tests/helper.py
        old_stem, new_stem = Path(old).stem, Path(new).stem
        if old.startswith("tests/test_"):
            folder = Path(new).parent.as_posix()
            text = text.replace(f"tests/__snapshots__/{old_stem}/", f"{folder}/__snapshots__/{new_stem}/")
            if old_stem != new_stem:
                text = re.sub(rf"(?<![\w/.-]){old_stem}\.py\b", f"{new_stem}.py", text)  # a bare file name
                if python:
                    text = re.sub(rf"^(\s*)from {old_stem} import\b", rf"\1from {new_stem} import", text, flags=re.MULTILINE)
                    text = re.sub(rf"^(\s*)import {old_stem}\b", rf"\1import {new_stem}", text, flags=re.MULTILINE)
    if python:
        for helper in HELPERS:
            stem = helper.removesuffix(".py")
            text = re.sub(rf"^(\s*)from {stem} import\b", rf"\1from support.{stem} import", text, flags=re.MULTILINE)
            text = re.sub(rf"^(\s*)import {stem}$", rf"\1from support import {stem}", text, flags=re.MULTILINE)
            if moved_test:
                text = text.replace(f'Path(__file__).with_name("{helper}")',
                                    f'Path(__file__).parents[1] / "support" / "{helper}"')
    if moved_test:
        text = text.replace("Path(__file__).resolve().parents[1]", "Path(__file__).resolve().parents[2]")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apply", action="store_true", help="move and rewrite (without it: only show the plan)")
    parser.add_argument("--map", action="append", default=[], metavar="FILE=FOLDER[/NEW.py]",
                        help="place a test file LAYOUT does not know (repeatable)")
    args = parser.parse_args()
    extra = {}
    for item in args.map:
        name, sep, target = item.partition("=")
        if not sep or not name.startswith("test_") or not name.endswith(".py"):
            sys.exit(f"layout: --map {item!r}: expected test_name.py=folder or test_name.py=folder/new_name.py")
        extra[name] = target

    moves, unknown = plan(extra)
    if unknown:
        print("layout: these test files are not in LAYOUT (tools/layout_tests.py); nothing was changed.", file=sys.stderr)
        print("Add a line to LAYOUT for each (or pass --map NAME=FOLDER[/NEW_NAME.py]):", file=sys.stderr)
        for name in unknown:
            print(f'    "{name}": "<{"|".join(FOLDERS)}>",', file=sys.stderr)
        return 2
    stale = sorted(set(LAYOUT) - {Path(o).name for o in moves})
    if stale:
        print(f"layout: note: in LAYOUT but not in tests/ (ignored): {', '.join(stale)}", file=sys.stderr)
    check(moves)
    crossing = cross_imports(moves)
    snapshots = {}
    for old, new in moves.items():
        folder = TESTS / "__snapshots__" / Path(old).stem
        if old.startswith("tests/test_") and folder.is_dir():
            snapshots[folder.relative_to(REPO).as_posix()] = f"{Path(new).parent.as_posix()}/__snapshots__/{Path(new).stem}"
    for old, new in {**moves, **snapshots}.items():
        print(f"{old:40s} -> {new}")
    if crossing:
        print("\nimports across layer folders (conftest.py puts the layer folders on sys.path for them; "
              "candidates for tests/support/):")
        for line in crossing:
            print(f"    {line}")
    if not args.apply:
        print("\n(dry run: nothing changed; --apply to do it)")
        return 0
    if git("status", "--porcelain", "--untracked-files=no").strip():
        sys.exit("layout: the work tree has uncommitted changes: commit or stash them first")

    for old, new in {**moves, **snapshots}.items():
        (REPO / new).parent.mkdir(parents=True, exist_ok=True)
        git("mv", old, new)
    if (TESTS / "__snapshots__").is_dir() and not any((TESTS / "__snapshots__").iterdir()):
        (TESTS / "__snapshots__").rmdir()
    init = TESTS / "support" / "__init__.py"
    init.write_text('"""Helpers the tests import (`from support import tui_store`, '
                    '`from support.campaign import claim`)."""\n')
    git("add", str(init.relative_to(REPO)))
    if crossing:
        conftest = TESTS / "conftest.py"
        text = conftest.read_text()
        anchor = text.index("\nREPO = ")  # after the imports and the module's first settings
        conftest.write_text(text[:anchor] + SYS_PATH_BLOCK.rstrip("\n") + "\n" + text[anchor:])

    moved_tests = {new for old, new in moves.items() if old.startswith("tests/test_")}
    changed = []
    for rel in git("ls-files").splitlines():
        path = REPO / rel
        if rel.startswith(NOT_REWRITTEN) or path.suffix not in TEXT_SUFFIXES or not path.is_file() \
                or rel == "tools/layout_tests.py":
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new_text = rewrite_text(text, moves, python=path.suffix == ".py" and rel.startswith("tests/"),
                                moved_test=rel in moved_tests)
        if new_text != text:
            path.write_text(new_text)
            changed.append(rel)
    git("add", "-A", "tests")
    print(f"\nmoved {len(moves)} files and {len(snapshots)} snapshot folders; rewrote paths in {len(changed)} files:")
    for rel in changed:
        print(f"    {rel}")
    print("\nnext: pytest --collect-only -q && git add -A && git commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
