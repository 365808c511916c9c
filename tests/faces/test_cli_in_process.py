"""Issue 27's command-line faces, called in-process (typer's CliRunner): what `run`, `show`,
`runs`, `archive`, `export` and `config-keys` print at 80 columns, and which arguments they take.

Nothing here trains: a launch is stopped before a worker starts (the launch functions are
replaced), and the runs shown are written through the store's own API (identity_store)."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from support import identity_store
from typer.testing import CliRunner

from rmconsole import cli, runner, store
from rmconsole.cli import run_commands
from rmconsole.runner import queue

pytestmark = pytest.mark.usefixtures("isolated_home")


def invoke(*args: str, width: int = 80, input: str | None = None) -> Any:
    """The console script's entry point (`cli.main`: one-line errors, their exit codes) in this
    process, in CliRunner's isolation: `.exit_code`, and `.output`, stdout and stderr together."""
    with CliRunner().isolation(input=input, env={"COLUMNS": str(width)}) as streams:
        argv, sys.argv = sys.argv, ["rmconsole", *args]
        code: Any = 0
        try:
            cli.main()
        except SystemExit as done:
            code = done.code
        finally:
            sys.argv = argv
        output = streams[-1].getvalue().decode()  # (click 8.2+: stdout and stderr as they interleaved)
    return SimpleNamespace(exit_code=code if isinstance(code, int) else (0 if code is None else 1), output=output)


# ---------------------------------------------------------------------- run: sweeps, names, seeds


@pytest.fixture
def no_queue_runner(monkeypatch) -> None:
    """A detached sweep's queue runner is not started (nothing trains); the runs stay queued."""
    monkeypatch.setattr(queue, "start_queue_runner", lambda *a, **k: SimpleNamespace(pid=0))


def test_a_list_that_expands_is_said_and_scripts_go_on(no_queue_runner) -> None:
    """`--set augment=cutmix,autoaug` (a slip for '+') once started two runs without a word."""
    out = invoke("run", "--set", "augment=cutmix,autoaug", "--set", "epochs=1", "--detach", "--name", "aug")
    assert out.exit_code == 0, out.output
    assert (
        "this expands to 2 runs (augment = 2): augment=cutmix | augment=autoaug — to combine them in one run, "
        "join with '+': --set augment=cutmix+autoaug"
    ) in out.output.replace("\n", " ")
    assert [r.name for r in store.list_runs()] == ["aug·augment=cutmix", "aug·augment=autoaug"]


@pytest.mark.parametrize("answer, stored", [("n\n", 0), ("y\n", 2)])
def test_at_a_terminal_the_expansion_is_asked(monkeypatch, no_queue_runner, answer: str, stored: int) -> None:
    monkeypatch.setattr(run_commands, "at_terminal", lambda: True)
    out = invoke("run", "--set", "augment=cutmix,autoaug", "--set", "epochs=1", "--detach", input=answer)
    assert "start these 2 runs? [y/N]" in out.output
    assert out.exit_code == (1 if stored == 0 else 0), out.output
    assert len(store.list_runs()) == stored
    if not stored:
        assert "nothing started: the 2 runs were not confirmed" in out.output


def test_yes_skips_the_question_and_seeds_alone_are_not_asked(monkeypatch, no_queue_runner) -> None:
    monkeypatch.setattr(run_commands, "at_terminal", lambda: True)
    out = invoke("run", "--set", "method=rm,er", "--set", "epochs=1", "--detach", "--yes")
    assert out.exit_code == 0 and "[y/N]" not in out.output and "this expands to 2 runs" in out.output
    out = invoke("run", "--set", "epochs=1", "--seeds", "1,2", "--detach")  # seeds are asked for by name
    assert out.exit_code == 0 and "[y/N]" not in out.output and "expands" not in out.output


def test_sweep_runs_are_told_apart_and_a_sweep_can_be_named(no_queue_runner) -> None:
    """`--set method=rm,finetune,er --seeds 1,2 --name study` once named all six runs "study"."""
    out = invoke(
        "run",
        "--set",
        "method=rm,finetune,er",
        "--set",
        "epochs=1",
        "--seeds",
        "1,2",
        "--name",
        "study",
        "--sweep-name",
        "study-1",
        "--detach",
        "--yes",
    )
    assert out.exit_code == 0, out.output
    runs = store.list_runs()
    assert [r.name for r in runs] == [
        "study·rm·s1",
        "study·finetune·s1",
        "study·er·s1",
        "study·rm·s2",
        "study·finetune·s2",
        "study·er·s2",
    ]
    assert {r.sweep_id for r in runs} == {"study-1"}
    listed = invoke("runs", "--sweep", "study-1")
    assert listed.exit_code == 0 and "study·finetune·s2" in listed.output
    again = invoke("run", "--set", "method=rm,er", "--sweep-name", "study-1", "--detach", "--yes")
    assert again.exit_code == 2 and "a sweep of that name is already in the store" in again.output
    templated = invoke("run", "--set", "lr=0.1,0.05", "--set", "epochs=1", "--name-template", "lr{lr}", "--detach")
    assert templated.exit_code == 0 and [r.name for r in store.list_runs()][-2:] == ["lr0.1", "lr0.05"]


def test_one_seed_is_one_run_and_does_not_take_over_sweep_last(monkeypatch, no_queue_runner) -> None:
    invoke("run", "--set", "method=rm,er", "--set", "epochs=1", "--detach", "--yes")
    sweep = store.sweep_ids()[-1]
    seen: dict[str, Any] = {}

    def launch_run(preset, pairs, **kwargs):  # (stands for the launch: nothing starts)
        seen.update(pairs=pairs, **kwargs)
        return SimpleNamespace(run_id=99, config=None, process=None, job_id=None, preset="p")

    monkeypatch.setattr(runner.launch, "launch_run", launch_run)  # (what runner.launch_request calls)
    out = invoke("run", "--seeds", "3", "--set", "epochs=1", "--detach")
    assert out.exit_code == 0 and out.output.strip() == "99"
    assert seen["pairs"] == ["epochs=1", "seed=3"] and seen["seed"] is None
    assert store.sweep_ids()[-1] == sweep  # `--sweep last` is still the sweep
    both = invoke("run", "--seeds", "3", "--seed", "4")
    assert both.exit_code == 2 and "give either --seed or --seeds, not both" in both.output
    alone = invoke("run", "--sweep-name", "x", "--detach")
    assert alone.exit_code == 2 and "--sweep-name is for a sweep, and this starts one run" in alone.output


# ---------------------------------------------------------------------- show and the end of run


def _show(run_id: int, *args: str) -> str:
    out = invoke("show", str(run_id), *args)
    assert out.exit_code == 0, out.output
    return out.output


def test_show_prints_the_keys_the_method_reads_with_non_defaults_marked() -> None:
    ids = identity_store.build()
    text = _show(ids["base"])
    config = text.split("config (* not the default): ", 1)[1].split(" task ", 1)[0].replace("\n", " ")
    assert "epochs=16*" in config and "lr=0.05 " in config and "rm_variant=paper" in config
    for absent in ("bic_", "ewcpp_", "mir_", "scr_", "online_iter", "compute_budget", "amp=", "model_weights"):
        assert absent not in config, absent
    assert all(len(line) <= 80 for line in text.splitlines())


def test_show_puts_per_class_accuracy_beside_memory_slots_old_apart_from_new() -> None:
    ids = identity_store.build()
    text = _show(ids["base"])
    block = text.split("per class after task 5/5 (accuracy %/memory slots)", 1)[1]
    assert "  old (8, mean " in block and "  new (2, mean " in block  # blurry: tasks 1-4's classes, then task 5's
    assert "/20" in block  # each class's memory slots beside its accuracy
    running = " ".join(_show(ids["partial"]).split())
    assert "per class after task 3/5" in running and "(partial: the run is not through all its tasks)" in running


def test_the_end_of_run_fits_30_lines_at_80_columns() -> None:
    """`run` prints its header, one line per task while it trains, then this (brief) summary:
    the default digits run measured 28 lines in all at 80 columns."""
    ids = identity_store.build()
    with CliRunner().isolation(env={"COLUMNS": "80"}) as streams:
        cli.print_run(ids["base"], brief=True)
        text = streams[-1].getvalue().decode()
    lines = text.splitlines()
    assert len(lines) <= 30 - 8, text  # header (2), 5 task lines, the blank line the progress leaves
    assert all(len(line) <= 80 for line in lines)
    assert "epochs inside each task (mean" not in text and f"rmconsole show {ids['base']}" in text


def _mnist(overrides: dict, **kwargs: Any) -> int:
    base = {"dataset": "mnist", "memory_size": 500, "epochs": 256, "augment": "cutmix+autoaug"}
    return identity_store.stored({**base, **overrides}, **kwargs)


def test_show_puts_a_delta_beside_the_paper_only_for_its_protocol_and_a_finished_run() -> None:
    """The run page and `report --paper` put Δ −15.96 beside an 8-epoch, augment=none run."""
    identity_store.build()
    same, short, partial = (
        _mnist({}),
        _mnist({"epochs": 8, "augment": "none"}),
        _mnist({}, tasks_done=3, status="running"),
    )
    paper = [line for line in _show(same).splitlines() if line.startswith("paper ")]
    assert len(paper) == 1 and "A_last 91.80 ± 0.69 (Δ " in paper[0] and "not this run's protocol" not in paper[0]
    text = _show(short).replace("\n", " ")
    assert "(Δ" not in text and "(no Δ)" in text
    assert "row 'RM w/o DA'" in text and "not this run's protocol: epochs 8≠256" in text  # nearest row: w/o DA
    text = _show(partial).replace("\n", " ")
    assert "(Δ" not in text and "no Δ: this run's is partial, @3/5" in text


# ---------------------------------------------------------------------- runs at 80 columns


def test_runs_is_one_line_per_run_and_a_live_status_never_pushes_i_last_off() -> None:
    ids = identity_store.build()
    store.update_run(ids["partial"], phase="memory update")  # a long live status
    out = invoke("runs")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert all(len(line) <= 80 for line in lines), out.output
    assert lines[0].rstrip().endswith("I_last")
    rows = [line for line in lines[1:] if re.match(r" *\d+ +(finished|stopped|queued|\d/5)", line)]
    assert len(rows) == 7 and len(lines) <= 7 + 5  # one line per (unarchived) run, then the notes
    assert all(row.rstrip().endswith(("—", "0")) for row in rows)  # I_last's cell ends every row
    live = next(row for row in rows if row.lstrip().startswith(str(ids["partial"])))
    assert "4/5 memory…" in live or "4/5 memory " in live
    assert "@3/5 86.00" in live and "@3/5 0.00" in live  # A_last and F_last both marked partial


def test_runs_12_is_run_12_not_a_sweep_whose_id_holds_12() -> None:
    identity_store.build()
    while store.count_runs() < 12:
        identity_store.stored({"epochs": 2}, sweep="20261124-221233-9ae0")
    out = invoke("runs", "12")
    rows = [line for line in out.output.splitlines() if re.match(r" *\d+ +[a-z]", line)]
    assert out.exit_code == 0 and [row.split()[0] for row in rows] == ["12"], out.output


# ---------------------------------------------------------------------- archive, export, config-keys


def test_archive_with_nothing_to_archive_is_a_notice() -> None:
    identity_store.build()
    out = invoke("archive", "--where", "status:failed")
    assert out.exit_code == 0 and out.output.startswith("archived 0 runs: none matches --where status:failed")
    out = invoke("archive")  # no runs and no filter: still a usage error
    assert out.exit_code == 2


def test_export_help_keeps_the_extras_and_the_hint_works_with_the_skinny_client(tmp_path) -> None:
    help_text = invoke("export", "--help", width=200).output
    assert "pip install 'rmconsole[mlflow]'" in help_text and "'rmconsole[tensorboard]'" in help_text
    pytest.importorskip("mlflow")
    ids = identity_store.build()
    out = invoke("export", str(ids["base"]), "--to", "mlflow", str(tmp_path / "mlruns"))
    assert out.exit_code == 0, out.output
    uri = (tmp_path / "mlruns").resolve().as_uri()
    assert (
        f"list them: MLFLOW_ALLOW_FILE_STORE=true MLFLOW_TRACKING_URI={uri} mlflow runs list --experiment-id "
        in out.output
    )
    assert "pip install mlflow" in out.output and "mlflow ui --backend-store-uri ./" not in out.output


def test_config_keys_essential_and_run_help_name_the_keys_a_first_run_changes() -> None:
    out = invoke("config-keys", "--essential", width=300)
    assert out.exit_code == 0
    keys = [line.split(" ", 1)[0] for line in out.output.splitlines() if line and not line.startswith((" ", "every"))]
    assert keys[:4] == ["dataset", "method", "memory_size", "n_tasks"] and "bic_temperature" not in out.output
    assert "epochs (default 256): memory epochs E" in out.output
    assert "dataset, method, memory_size (K), n_tasks" in invoke("run", "--help", width=200).output


def test_config_keys_at_80_columns_keeps_every_key_and_value_whole() -> None:
    """docs/extending.md greps it (`rmconsole config-keys | grep lwf_`): piped, the table is 80
    columns wide, and it printed `lwf_tempe…`, `memory_si…`, `fashion_m…`, names no `--set` takes."""
    from rmconsole.config import key_table

    out = invoke("config-keys")
    assert out.exit_code == 0 and "…" not in out.output
    first_cells = {line.split("│")[1].strip() for line in out.output.splitlines() if line.startswith("│ ")}
    assert {row.key for row in key_table()} <= first_cells
