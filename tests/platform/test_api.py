"""rmconsole.api: a store's runs and rows as pandas DataFrames, selected with the CLI's filter
grammar, and docs/api.md's worked example run as written (on a store built here, no training)."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas", reason="rmconsole.api needs pandas: pip install 'rmconsole[pandas]'")

from rmconsole import api, store  # noqa: E402
from rmconsole.cl.events import AnytimePoint, TaskOutcome, TaskPlan  # noqa: E402
from rmconsole.config import load_config  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _sweep(methods: tuple[str, ...], seeds: tuple[int, ...], sweep_id: str) -> dict[tuple[str, int], int]:
    """A finished 2-task sweep: task accuracies 40 + 10·seed then 60 + 10·seed (rm) / 50 + seed (er),
    one memory update per task, two epoch rows per task."""
    ids = {}
    for method in methods:
        for seed in seeds:
            _, cfg = load_config(None, {"n_tasks": 2, "seed": seed, "method": method})
            run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online", sweep_id)
            store.record_start(
                run_id, [TaskPlan(t, 100, [t], [50, 50], f"h{t}") for t in range(2)], [0, 1], ["a", "b"], []
            )
            final = 60.0 + 10 * seed if method == "rm" else 50.0 + seed
            for t, acc in enumerate((40.0 + 10 * seed, final)):
                store.record_task(run_id, TaskOutcome(t, acc, [acc, acc], [acc, acc], [0, 1], 1.0))
                store.record_memory(run_id, t, [10 + t, 10 - t], 10, {"policy": method})
                store.record_epochs(
                    run_id,
                    [
                        {
                            "task": t,
                            "phase": "memory",
                            "epoch": e,
                            "epochs": 2,
                            "loss": 1.0 / (e + 1),
                            "lr": 0.05,
                            "samples": 20,
                            "seconds": 0.1,
                        }
                        for e in range(2)
                    ],
                )
            store.update_run(run_id, status="finished")
            ids[(method, seed)] = run_id
    return ids


def test_runs_tasks_epochs_memory_as_frames_with_the_cli_filters(isolated_home: Path) -> None:
    ids = _sweep(("rm", "er"), (1, 2), "sweep-a")
    s = api.open_store(isolated_home)  # the folder (RMCONSOLE_HOME); its rmconsole.db works too
    assert api.open_store(isolated_home / "rmconsole.db").url == s.url
    runs = s.runs("method:rm")
    assert sorted(runs["id"]) == [ids["rm", 1], ids["rm", 2]]
    assert list(runs.sort_values("seed")["A_last"]) == [70.0, 80.0]  # the store's own metrics
    assert set(runs["memory_size"]) == {200} and set(runs["n_tasks"]) == {2} and "lr" in runs.columns
    assert list(s.runs("A_last>75")["id"]) == [ids["rm", 2]]
    assert len(s.runs(sweep="last")) == 4 and len(s.runs(ids=[ids["er", 1]])) == 1
    tasks = s.tasks("seed:2")
    assert list(tasks.columns[:5]) == ["run_id", "method", "dataset", "memory_size", "seed"]
    assert sorted(zip(tasks["method"], tasks["task"], tasks["accuracy"])) == [
        ("er", 0, 60.0),
        ("er", 1, 52.0),
        ("rm", 0, 60.0),
        ("rm", 1, 80.0),
    ]
    epochs = s.epochs(ids=[ids["rm", 1]])
    assert list(epochs["loss"]) == [1.0, 0.5, 1.0, 0.5] and set(epochs["phase"]) == {"memory"}
    memory = s.memory(ids=[ids["er", 1]])
    assert list(memory["update"]) == [0, 0, 1, 1] and list(memory["count"]) == [10, 10, 11, 9]
    assert set(memory["size"]) == {20} and set(memory["policy"]) == {"er"}
    assert s.anytime("method:rm").empty  # task runs have no anytime points
    with pytest.raises(api.ApiError, match="unknown filter key 'metod'"):
        s.runs("metod:rm")
    with pytest.raises(api.ApiError, match="no rmconsole store at"):
        api.open_store(isolated_home / "nowhere")


def test_anytime_points_of_a_task_free_run(isolated_home: Path) -> None:
    _, cfg = load_config("digits-iblurry50-10")
    run_id = store.create_run(cfg.to_dict(), "digits-iblurry50-10")
    store.record_anytime(run_id, [AnytimePoint(0, 50 * (i + 1), 20.0 + i, 3 + i) for i in range(3)])
    points = api.open_store(isolated_home).anytime("stream:iblurry")
    assert list(points["samples"]) == [50, 100, 150] and list(points["accuracy"]) == [20.0, 21.0, 22.0]
    assert set(points["method"]) == {"er"} and list(points["n_classes"]) == [3, 4, 5]


def test_the_worked_example_in_docs_runs_as_written(
    isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/api.md's python block, run on a store of two sweeps (the example reads the newest)."""
    _sweep(("rm",), (1,), "sweep-old")
    newest = _sweep(("rm", "er"), (1, 2), "sweep-new")
    example = re.search(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert example is not None
    monkeypatch.setattr(sys, "argv", ["example", str(isolated_home)])
    exec(compile(example.group(1), str(DOC), "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert (tmp_path / "accuracy.png").stat().st_size > 1000  # (the test's working folder)
    table = out.split("mean", 1)[1]
    rm = re.search(r"^rm\s+(\S+)\s+(\S+)\s+(\d+)", table, flags=re.M)
    er = re.search(r"^er\s+(\S+)\s+(\S+)\s+(\d+)", table, flags=re.M)
    assert rm and er and (float(rm[1]), int(rm[3])) == (75.0, 2) and (float(er[1]), int(er[3])) == (51.5, 2)
    assert math.isclose(float(rm[2]), 7.07, abs_tol=0.01)  # sample std of 70, 80
    assert all(str(i) in out for i in newest.values())
