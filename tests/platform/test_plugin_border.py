"""A plug-in's values are checked at the border (issue 38): a metric value that is not a finite
number is stored as missing with one line naming the metric, never as `Infinity`; a stored row no
reader can use never breaks `runs`, `show` or `report`; `--json` is strict JSON on both backends.

Plug-ins are faked in this process (conftest.install_fake_plugins): no pip, milliseconds each."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import install_fake_plugins
from support.campaign import claim
from support.cli import in_process

from rmconsole import metric_registry, store
from rmconsole.cl import metric_catalog as C
from rmconsole.cl.events import TaskOutcome
from rmconsole.config import load_config

HERE = "test_plugin_border.py::"


def strict(text: str) -> Any:
    """json.loads that refuses Infinity, -Infinity and NaN (what jq, JavaScript and Go refuse)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------- the value itself

ODD = {
    "inf": float("inf"),
    "-inf": float("-inf"),
    "huge int": 10**400,
    "huger int": 10**5000,  # (its repr alone raises past 4300 digits)
    "string": "abc",
    "numeric string": "inf",
    "bytes": b"1",
    "object": object(),
    "list": [1.0],
}


@pytest.mark.parametrize("case", list(ODD))
def test_a_plugin_metric_that_is_not_a_finite_number_is_missing_with_one_line(case: str) -> None:
    odd = C.Metric(f"odd_{case.replace(' ', '_').replace('-', 'minus')}", "o", "o", compute=lambda rows: ODD[case])
    summary = C.summarize(C.RunRows(), (odd, C.Metric("fine", "f", "f", compute=lambda rows: 2.5)))
    assert summary == {odd.name: None, "fine": 2.5}
    line = next(f for f in C.failures() if f"{odd.name!r}" in f)
    assert "\n" not in line and len(line) <= 300 and "stored as missing" in line, line
    assert "Traceback" not in line


def test_nan_is_not_measured_a_count_stays_an_int_and_a_big_finite_int_is_kept() -> None:
    assert C.checked_value("m", float("nan")) is None
    assert C.checked_value("m", 7) == 7 and type(C.checked_value("m", 7)) is int
    assert C.checked_value("m", 2**100) == 2**100  # finite as a float: kept
    assert C.checked_value("m", True) == 1.0
    with pytest.raises(C.NotFinite, match=r"metric 'm' returned an integer of 1329 bits, not a finite number"):
        C.checked_value("m", 10**400)


def test_what_a_plugin_metric_prints_goes_to_stderr_not_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    def noisy(rows: C.RunRows) -> float:
        print("hello from the plug-in")
        return 1.0

    assert C.summarize(C.RunRows(), (C.Metric("noisy", "n", "n", compute=noisy),)) == {"noisy": 1.0}
    out, err = capsys.readouterr()
    assert out == "" and "hello from the plug-in" in err


# ---------------------------------------------------------------------- through the store

PLUGIN_SOURCE = """
from rmconsole.cl.metric_catalog import Metric
INF = Metric("boundless", "boundless", "inf", compute=lambda rows: float("inf"), column=9)
HUGE = Metric("enormous", "enormous", "10**400", compute=lambda rows: 10**400)
WORD = Metric("wordy", "wordy", "a string", compute=lambda rows: "high")
FINE = Metric("fine_one", "fine", "a number", compute=lambda rows: 42.0)
"""


@pytest.fixture
def odd_metrics(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    install_fake_plugins(
        monkeypatch,
        tmp_path,
        "metric",
        "plugborder",
        PLUGIN_SOURCE,
        "plug-border",
        {
            "boundless": "plugborder:INF",
            "enormous": "plugborder:HUGE",
            "wordy": "plugborder:WORD",
            "fine_one": "plugborder:FINE",
        },
    )
    monkeypatch.setattr(C, "_failures", {})


def one_finished_run() -> int:
    _, cfg = load_config(None, {"n_tasks": 1})
    run_id = store.create_run(cfg.to_dict(), "r")
    store.record_task(run_id, TaskOutcome(0, 80.0, [80.0], [80.0] * 10, list(range(10)), 1.0))
    return run_id


@pytest.mark.usefixtures("store_backend", "odd_metrics")
def test_runs_json_is_strict_json_on_a_store_holding_a_plugins_inf(store_backend: str) -> None:
    """The reproduction: a metric plug-in returning inf made `runs --json` print `Infinity` (SQLite)
    and every task write fail (PostgreSQL, 0 tasks stored). Now the value is missing, said once."""
    run_id = one_finished_run()
    assert store.task_results(run_id), "the task row was not stored"
    record = store.run_record(run_id)
    assert record.value("fine_one") == 42.0 and record.value("A_last") == 80.0
    rows = {
        "boundless": claim(
            "a metric plug-in returns inf", HERE + "test_runs_json_is_strict_json_on_a_store_holding_a_plugins_inf"
        ),
        "enormous": claim(
            "a metric plug-in returns 10**400", HERE + "test_runs_json_is_strict_json_on_a_store_holding_a_plugins_inf"
        ),
        "wordy": claim(
            "a metric plug-in returns a string", HERE + "test_runs_json_is_strict_json_on_a_store_holding_a_plugins_inf"
        ),
    }
    for name, row in rows.items():
        assert record.value(name) is None
        line = next(line for line in metric_registry.problems() if f"{name!r}" in line)
        row.check(None, line)
    for args in (("runs", "--json"), ("show", str(run_id), "--json"), ("report", "--format", "json")):
        done = in_process(*args)
        assert done.returncode == 0, (args, done.stderr)
        parsed = strict(done.stdout)
        assert parsed, args
    claim(
        "runs --json with a plug-in's inf stored",
        HERE + "test_runs_json_is_strict_json_on_a_store_holding_a_plugins_inf",
    ).check(0, "")
    runs = strict(in_process("runs", "--json").stdout)
    assert runs[0]["metrics"]["fine_one"] == 42.0 and runs[0]["metrics"].get("boundless") is None
    table = in_process("runs")
    assert table.returncode == 0 and "Traceback" not in table.stderr


def test_the_store_writes_strict_json_whatever_it_is_handed() -> None:
    """Any JSON column (a method's memory info, online figures) written through the store: a
    non-finite float becomes null, never the `Infinity` PostgreSQL refuses."""
    from rmconsole.store.db import store_json

    assert store_json({"a": [1.0, float("inf"), {"b": float("nan")}], "c": -float("inf")}) == (
        '{"a": [1.0, null, {"b": null}], "c": null}'
    )
    assert store_json({"a": 1}) == '{"a": 1}'


def rows_no_reader_can_use(home: Path) -> None:
    """Three runs whose stored metrics an older version or another writer left unreadable."""
    _, cfg = load_config(None)
    for name in "abc":
        store.create_run(cfg.to_dict(), name)
    con = sqlite3.connect(home / "rmconsole.db")
    try:
        con.execute(
            "update run set metrics = ? where id = 1",
            ('{"A_last": Infinity, "A_avg": 1' + "0" * 400 + ', "F_last": NaN, "tasks_done": 1}',),
        )
        con.execute("update run set metrics = ? where id = 2", ('{"A_last": "abc", "tasks_done": "x", "topk": "y"}',))
        con.execute("update run set metrics = ? where id = 3", ("[1, 2]",))
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize(
    "args",
    [("runs",), ("runs", "--json"), ("show", "1", "--json"), ("show", "2"), ("report",), ("report", "--format", "csv")],
)
def test_a_stored_row_no_reader_can_use_never_breaks_a_read_command(isolated_home: Path, args: tuple[str, ...]) -> None:
    """A stored 10**400 made `runs`, `show` and `report` fail with an internal OverflowError
    (every read command, for every run); a stored "x" as tasks_done made `show` refuse."""
    row = claim(
        "a stored metric no reader can use", HERE + "test_a_stored_row_no_reader_can_use_never_breaks_a_read_command"
    )
    rows_no_reader_can_use(isolated_home)
    done = in_process(*args)
    row.check(done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    if "--json" in args:
        strict(done.stdout)


# ---------------------------------------------------------------------- importing a plug-in

NOISY_SOURCE = """
print("hello from plugnoisy at import")
from rmconsole.cl.metric_catalog import Metric
M = Metric("noisy_metric", "noisy", "prints at import", compute=lambda rows: 1.0)
"""

SLOW_SOURCE = """
import time
time.sleep(20)
from rmconsole.cl.metric_catalog import Metric
M = Metric("slow_metric", "slow", "hangs at import", compute=lambda rows: 1.0)
"""


def test_what_a_plugin_prints_at_import_never_mixes_into_json_or_csv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install_fake_plugins(
        monkeypatch, tmp_path, "metric", "plugnoisy", NOISY_SOURCE, "plug-noisy", {"noisy_metric": "plugnoisy:M"}
    )
    one_finished_run()
    monkeypatch.delitem(__import__("sys").modules, "plugnoisy", raising=False)
    from rmconsole import plugins

    plugins.forget()
    row = claim("a plug-in prints at import", HERE + "test_what_a_plugin_prints_at_import_never_mixes_into_json_or_csv")
    for args in (("runs", "--json"), ("report", "--format", "csv"), ("show", "1", "--json")):
        done = in_process(*args)
        row.check(done.returncode, done.stderr)
        assert "hello from plugnoisy" not in done.stdout, args
        if "--json" in args:
            strict(done.stdout)
        plugins.forget()
        monkeypatch.delitem(__import__("sys").modules, "plugnoisy", raising=False)


def test_a_plugin_whose_import_hangs_is_skipped_after_the_limit_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import time

    install_fake_plugins(
        monkeypatch, tmp_path, "metric", "plugslow", SLOW_SOURCE, "plug-slow", {"slow_metric": "plugslow:M"}
    )
    started = time.monotonic()
    done = in_process("runs", "--json", env={"RMCONSOLE_PLUGIN_IMPORT_S": "0.3"})
    assert time.monotonic() - started < 10
    claim(
        "a plug-in's import hangs", HERE + "test_a_plugin_whose_import_hangs_is_skipped_after_the_limit_with_one_line"
    ).check(done.returncode, done.stderr)
    assert strict(done.stdout) == []
    lines = [line for line in done.stderr.splitlines() if "slow_metric" in line]
    assert len(lines) == 1, done.stderr
    assert "took longer than 0.3 s; skipped" in lines[0] and "plug-slow" in lines[0]
    assert "RMCONSOLE_PLUGIN_IMPORT_S" in lines[0]


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf"])
def test_a_bad_import_limit_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from rmconsole import plugins

    monkeypatch.setenv("RMCONSOLE_PLUGIN_IMPORT_S", value)
    with pytest.raises(plugins.PluginError, match=r"RMCONSOLE_PLUGIN_IMPORT_S=.*allowed: seconds >= 0") as err:
        plugins.import_limit_s()
    claim("a bad RMCONSOLE_PLUGIN_IMPORT_S", HERE + "test_a_bad_import_limit_is_one_line_naming_the_variable").check(
        None, str(err.value)
    )
    monkeypatch.setenv("RMCONSOLE_PLUGIN_IMPORT_S", "0")
    assert plugins.import_limit_s() == 0
    monkeypatch.delenv("RMCONSOLE_PLUGIN_IMPORT_S")
    assert plugins.import_limit_s() == 10


# ---------------------------------------------------------------------- a dataset plug-in's data

DATASET_SOURCE = """
import os
from rmconsole.cl.datasets import DatasetSpec

SPEC = DatasetSpec(name="shifty", description="ten declared classes", load="plugshifty:load", n_classes=10,
                   image_shape=(1, 8, 8), mean=(0.5,), std=(0.25,))


def load(spec, root, options):
    import torch
    from rmconsole.cl.data import Dataset, TensorImages

    fault = os.environ.get("SHIFTY_FAULT", "")
    names = [str(c) for c in range(10)]
    def split(n):
        labels = torch.arange(10).repeat(n)
        if fault == "labels 5-14":
            labels = labels + 5
        if fault == "negative label":
            labels = labels - 1
        if fault == "float labels":
            labels = labels.float()
        if fault == "2-d labels":
            labels = labels.view(-1, 1)
        images = torch.zeros(len(labels), 1, 8, 8, dtype=torch.uint8)
        if fault == "wrong shape":
            images = torch.zeros(len(labels), 3, 8, 8, dtype=torch.uint8)
        return TensorImages(images, labels)
    if fault == "15 names":
        names = [str(c) for c in range(15)]
    test = split(2)
    if fault == "test of another shape":
        test = TensorImages(torch.zeros(20, 1, 9, 9, dtype=torch.uint8), torch.arange(10).repeat(2))
    if fault == "empty test":
        test = TensorImages(torch.zeros(0, 1, 8, 8, dtype=torch.uint8), torch.zeros(0, dtype=torch.int64))
    mean, std = ((0.5, 0.5, 0.5), (0.2, 0.2, 0.2)) if fault == "3 means" else (spec.mean, spec.std)
    return Dataset(spec.name, split(5), test, names, mean, std)
"""

DATASET_FAULTS = {
    "labels 5-14": "its train labels run from 5 to 14, but it has 10 classes; labels must be 0 to 9",
    "negative label": "its train labels run from -1 to 8, but it has 10 classes",
    "15 names": "declares 10 classes but its loader returned 15 class names",
    "wrong shape": "declares images of shape (1, 8, 8) but its loader returned train (3, 8, 8)",
    "test of another shape": "declares images of shape (1, 8, 8) but its loader returned train (1, 8, 8), test (1, 9, 9)",
    "float labels": "its train labels are torch.float32 of shape (50,); they must be int64 of one dimension",
    "2-d labels": "its train labels are torch.int64 of shape (50, 1); they must be int64 of one dimension",
    "empty test": "its test split is empty",
    "3 means": "its mean and std have 3 and 3 values for 1 channels",
}


@pytest.fixture
def shifty(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    from rmconsole import datasets
    from rmconsole.cl import datasets as science

    install_fake_plugins(
        monkeypatch, tmp_path, "dataset", "plugshifty", DATASET_SOURCE, "plug-shifty", {"shifty": "plugshifty:SPEC"}
    )
    science._registered.clear()
    datasets.get("shifty")  # (registered as a config naming it would)
    yield
    science._registered.clear()


@pytest.mark.usefixtures("shifty")
@pytest.mark.parametrize("fault", list(DATASET_FAULTS))
def test_a_dataset_plugins_data_is_checked_against_its_declaration(monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The reproduction: a plug-in declaring 10 classes and yielding labels 5-14 trained silently
    as a 15-class run; the built-ins' loaders refuse labels out of range. Now every loader is
    checked against its spec, in one line naming the dataset and its loader."""
    from rmconsole.cl.data import DatasetInvalid, DatasetMissing, load_dataset

    test = HERE + "test_a_dataset_plugins_data_is_checked_against_its_declaration"
    rows = {
        "labels 5-14": claim("a dataset plug-in's labels 5-14 for 10 classes", test),
        "negative label": claim("a dataset plug-in's negative label", test),
        "15 names": claim("a dataset plug-in returns more classes than it declares", test),
        "wrong shape": claim("a dataset plug-in's images of another shape", test),
        "test of another shape": claim("a dataset plug-in's test images of another shape", test),
        "float labels": claim("a dataset plug-in's float labels", test),
        "2-d labels": claim("a dataset plug-in's labels of two dimensions", test),
        "empty test": claim("a dataset plug-in's empty test split", test),
        "3 means": claim("a dataset plug-in's mean and std for other channels", test),
    }
    row = rows[fault]
    monkeypatch.setenv("SHIFTY_FAULT", fault)
    with pytest.raises(DatasetInvalid) as err:
        load_dataset("shifty")
    text = str(err.value)
    row.check(None, text)
    assert isinstance(err.value, DatasetMissing)  # (what the CLI and the worker say in one line)
    assert text.startswith("dataset 'shifty' (loader 'plugshifty:load'): ") and "\n" not in text
    assert DATASET_FAULTS[fault] in text, text


@pytest.mark.usefixtures("shifty")
def test_a_dataset_plugin_that_keeps_its_declaration_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmconsole.cl.data import load_dataset

    monkeypatch.delenv("SHIFTY_FAULT", raising=False)
    data = load_dataset("shifty")
    assert data.n_classes == 10 and int(data.train.labels.max()) == 9
