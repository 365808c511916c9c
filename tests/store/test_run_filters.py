"""The run filter grammar (store/filters.py): parsing, matching, errors; and its three users."""

from __future__ import annotations

import pytest
from support.cli import in_process
from test_intransigence_upper_bound import _stored

from rmconsole import store
from rmconsole.store import RunRecord, parse_run_filter
from rmconsole.store.filters import FilterError, Term, parse_term, where
from rmconsole.tui import data


def record(
    run_id: int,
    method: str = "rm",
    status: str = "finished",
    a_last: float | None = 80.0,
    i_last: float | None = None,
    **config,
) -> RunRecord:
    config = {"method": method, "dataset": "digits", "seed": 1, "memory_size": 200, **config}
    return RunRecord(
        id=run_id,
        status=status,
        preset="digits-blurry10-online",
        method=method,
        dataset="digits",
        memory_size=config["memory_size"],
        seed=config["seed"],
        n_tasks=5,
        task=None,
        phase=None,
        phase_done=0,
        phase_total=0,
        samples_per_s=None,
        eta_s=None,
        tasks_done=5,
        sweep_id=None,
        error=None,
        metrics={k: v for k, v in (("A_last", a_last), ("I_last", i_last)) if v is not None},
        config=config,
    )


def ids(text: str, records: list[RunRecord]) -> list[int]:
    return [r.id for r in parse_run_filter(text).select(records)]


def test_numbers_match_exactly_not_as_substrings() -> None:
    runs = [record(i) for i in (1, 10, 11, 12, 13, 14, 15)] + [record(20, memory_size=20), record(21, memory_size=200)]
    assert ids("id:1", runs) == [1]  # not 10-15
    assert ids("id=12", runs) == [12]
    assert ids("k:20", runs) == [20]  # not 200
    assert ids("memory_size:200.0", runs) == [r.id for r in runs if r.memory_size == 200]
    assert ids("id:1,14", runs) == [1, 14]  # a comma is OR


def test_a_number_among_the_words_matches_whole_not_inside_a_sweep_id() -> None:
    """`runs 12` once also listed every run of a sweep whose id held the digits 12."""
    import dataclasses

    runs = [record(12), record(112), record(3, seed=12), record(4)]
    runs += [
        dataclasses.replace(record(5), sweep_id="20261124-221233-9ae0"),
        dataclasses.replace(record(6), name="lr 12 try"),
    ]
    assert ids("12", runs) == [12, 3, 6]  # run 12, seed=12, a name's word 12; not run 112 nor the sweep
    assert ids("9ae0", runs) == [5]  # other words still match inside the text
    assert ids("221233", runs) == [5]  # a whole number of the sweep id is a word of it


def test_comparisons_on_metrics_and_missing_values() -> None:
    runs = [record(1, a_last=90.0, i_last=5.0), record(2, a_last=85.0), record(3, a_last=None, status="running")]
    assert ids("A_last>85", runs) == [1]
    assert ids("A_last>=85", runs) == [1, 2]
    assert ids("A_last<90", runs) == [2]  # a run without A_last never passes a comparison
    assert ids("A_last<=90 A_last>=85", runs) == [1, 2]  # space is AND
    assert ids("A_last=85", runs) == [2]
    assert ids("A_last!=85", runs) == [1, 3]
    assert ids("I_last<10", runs) == [1]
    assert ids("a_last>85", runs) == [1]  # keys without regard to case
    assert ids("A_last:none", runs) == [3]


def test_run_columns_config_keys_and_free_text() -> None:
    runs = [
        record(1, "rm", augment=["cutmix", "autoaug"], lr=0.05),
        record(2, "ewc", augment=[]),
        record(3, "joint", status="failed", lr=0.1, augment=["cutmix"]),
    ]
    assert ids("method:rm,ewc", runs) == [1, 2]
    assert ids("method!=rm,ewc", runs) == [3]
    assert ids("status:FINISHED method:ewc", runs) == [2]
    assert ids("augment:none", runs) == [2]  # as tables write an empty list
    assert ids("augment:cutmix+autoaug", runs) == [1]
    assert ids('augment:["cutmix","autoaug"],none', runs) == [1, 2]  # commas inside brackets do not split
    assert ids("lr:0.1", runs) == [3]
    assert ids("epochs:1", runs) == []  # a key the stored config lacks reads as its default
    default_epochs = store.filters.config_value({}, "epochs")
    assert ids(f"epochs:{default_epochs}", runs) == [1, 2, 3]
    assert ids("joint", runs) == [3] and ids("seed=1 k=200", runs) == [1, 2, 3]  # free text; k= is a key
    assert ids("", runs) == [1, 2, 3]


@pytest.mark.parametrize(
    "text, message",
    [
        ("metod:rm", "unknown filter key 'metod' (did you mean method?); known keys: id, status, preset"),
        ("A_last>high", "'A_last>high': '>' compares numbers, and 'high' is not one"),
        ("A_last>80,90", "a comma list goes with ':', '=' or '!=', not '>'"),
        ("status:", "'status:': give a value after ':', e.g. status:VALUE"),
        (":rm", "cannot read the filter term ':rm'"),
    ],
)
def test_unreadable_filters_are_one_line(text: str, message: str) -> None:
    with pytest.raises(FilterError) as err:
        parse_run_filter(text)
    assert message in str(err.value) and "\n" not in str(err.value)
    if text == "metod:rm":  # the line lists every kind of key
        assert "A_last" in str(err.value) and "memory_size" in str(err.value) and "sweep" in str(err.value)


def test_a_set_value_matches_any_member() -> None:
    """The extension point for keys whose value is a set (tags, once runs have them)."""
    term = where("method", ["paper"]).terms[0]
    assert isinstance(term, Term)
    assert term.matches(lambda key: frozenset({"paper", "draft"}))
    assert not term.matches(lambda key: frozenset({"draft"}))
    assert parse_term("cifar").matches(lambda key: None, "3 finished cifar")


def test_tui_filter_uses_the_grammar() -> None:
    runs = [record(1), record(10), record(11, memory_size=200), record(12, memory_size=20)]
    assert [r.id for r in data.arrange(runs, "id:1", "id", False)] == [1]
    assert [r.id for r in data.arrange(runs, "k:20", "id", False)] == [12]
    assert data.matches(runs[0], "status:finished A_last>=80")
    with pytest.raises(data.FilterError, match="unknown filter key 'colour'"):
        data.arrange(runs, "colour:red", "id", False)


def test_find_runs_applies_a_filter_to_the_store() -> None:
    rm, ewc, big = _stored("rm", 70.0), _stored("ewc", 90.0), _stored("rm", 88.0, memory_size=500)
    assert [r.id for r in store.find_runs("method:rm")] == [rm, big]
    assert [r.id for r in store.find_runs("A_last>80 k:500")] == [big]
    assert [r.id for r in store.find_runs(where("id", [str(ewc)]))] == [ewc]
    assert [r.id for r in store.find_runs()] == [rm, ewc, big]
    with pytest.raises(FilterError):
        store.find_runs("nonsense>1")


def test_cli_runs_and_report_take_the_filter(isolated_home) -> None:
    import json

    rm, ewc = _stored("rm", 70.0), _stored("ewc", 90.0)
    listed = json.loads(in_process("runs", "--json", "A_last>80").stdout)
    assert [r["id"] for r in listed] == [ewc]
    both = json.loads(in_process("runs", "--json", "method:rm,ewc", "status:finished").stdout)
    assert [r["id"] for r in both] == [rm, ewc]
    table = json.loads(in_process("report", "method:rm", "--format", "json").stdout)
    assert {run_id for row in table["rows"] for cell in row["cells"] for run_id in cell["runs"]} == {rm}
    for command in (["runs", "metod:rm"], ["report", "metod:rm"], ["runs", "A_last>high"]):
        bad = in_process(*command)
        assert bad.returncode != 0 and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.startswith("error: "), bad.stderr


@pytest.mark.asyncio
async def test_tui_filter_box_shows_an_unreadable_filter_on_the_status_line() -> None:
    from support import tui_store
    from test_tui import SIZE, table_ids, until

    from rmconsole.tui import RMConsoleApp

    ids = tui_store.build()
    app = RMConsoleApp(refresh_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 4, what="four rows")
        await pilot.press("slash", *"metod:rm")
        line = app.screen.query_one("#status-line")
        assert "filter: unknown filter key 'metod' (did you mean method?)" in str(line.render())
        assert line.has_class("problem") and table_ids(app) == []
        await pilot.press("backspace", "backspace", "backspace", "backspace", "backspace", *"hod:finetune")
        assert table_ids(app) == [ids["failed"]] and not line.has_class("problem")
        assert "1 match" in str(line.render())


def test_id_ranges_stay_ranges() -> None:
    """`report --runs 3-9,12` is a filter of two ranges, not a set of ids (1-99999999999 costs nothing)."""
    from rmconsole.store.filters import within

    huge = within("id", [(3, 9), (12, 12), (20, 99_999_999_999)])
    assert len(huge.terms) == 1 and huge.terms[0].ranges == ((3.0, 9.0), (12.0, 12.0), (20.0, 99_999_999_999.0))
    matches = [i for i in range(1, 30) if huge.matches(lambda key, i=i: i if key == "id" else None)]
    assert matches == [3, 4, 5, 6, 7, 8, 9, 12, *range(20, 30)]
    assert not huge.matches(lambda key: None)  # a run without the value never passes
