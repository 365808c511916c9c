"""A runs-page refresh costs what changed (issue 27 item 9): the feed says which rows changed,
the page places only those, the table draws only their cells and re-sorts only when one moved."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from rmconsole import store
from rmconsole.config import load_config
from rmconsole.tui import RMConsoleApp, data
from rmconsole.tui.messages import RunsLoaded
from rmconsole.tui.screens.runs import RunsScreen
from rmconsole.tui.widgets.runs_table import RunsTable

N_RUNS = 12


def make_runs(n: int = N_RUNS) -> list[int]:
    """`n` runs: every third running (on another host, a fresh heartbeat), the others finished
    with an A_last; every fourth named."""
    _, cfg = load_config("digits-blurry10-online", {"epochs": 1})
    ids = store.create_runs([{**cfg.to_dict(), "seed": i % 3 + 1} for i in range(n)], "digits-blurry10-online")
    for k, run_id in enumerate(ids):
        running = k % 3 == 0
        store.update_run(
            run_id,
            status="running" if running else "finished",
            host="elsewhere",
            heartbeat_at=store.utcnow(),
            n_tasks=5,
            task=2 if running else 4,
            phase="stream" if running else "done",
            phase_done=10,
            phase_total=100,
            name=f"study {k}" if k % 4 == 0 else None,
            metrics={"A_last": 50.0 + k, "tasks_done": 2 if running else 5},
        )
    return ids


def table_ids(table: RunsTable) -> list[int]:
    return [int(str(row.key.value)) for row in table.ordered_rows]


def counting(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[tuple]:
    """Record each call of `owner.name` (its arguments) and still make it."""
    calls: list[tuple] = []
    real: Callable = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


async def settled(app: RMConsoleApp, pilot: Any, n: int) -> tuple[RunsScreen, RunsTable]:
    screen = app.screen
    assert isinstance(screen, RunsScreen)
    table = screen.query_one(RunsTable)
    for _ in range(400):
        if table.row_count == n:
            break
        await pilot.pause(0.02)
    assert table.row_count == n
    return screen, table


@pytest.mark.asyncio
async def test_a_refresh_draws_only_the_rows_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = make_runs()
    app = RMConsoleApp(refresh_s=3600, reap_every_s=None)  # refreshes driven by hand below
    async with app.run_test(size=(140, 40)) as pilot:
        screen, table = await settled(app, pilot, N_RUNS)
        table.move_cursor(row=table.get_row_index(str(ids[4])))
        feed = data.RunsFeed()
        feed.read()
        moving = ids[3]  # a running run makes progress
        assert table.get_cell(str(moving), "progress").plain.endswith("10%")  # (its cells drawn once)
        store.update_run(moving, phase_done=60)
        rows, changed = feed.read()
        assert changed and feed.delta is not None
        assert [r.id for r in feed.delta.updated] == [moving] and feed.delta.gone == ()

        built = counting(monkeypatch, table, "row_cells")
        updated = counting(monkeypatch, table, "update_cell")
        sorted_ = counting(monkeypatch, table, "sort")
        arranged = counting(monkeypatch, data, "arrange")
        full = counting(monkeypatch, table, "watch_runs")
        screen.on_runs_loaded(RunsLoaded(rows, changed, feed.delta))
        assert [args[0].id for args in built] == [moving]  # only its cells were built
        assert {args[0] for args in updated} == {str(moving)} and [args[1] for args in updated] == ["progress"]
        assert not sorted_ and not arranged and not full  # no re-sort, no arrangement or sync of every row
        await pilot.pause()
        assert table.get_cell(str(moving), "progress").plain.endswith("60%")
        assert table_ids(table) == sorted(ids, reverse=True) and table.cursor_run_id == ids[4]


@pytest.mark.asyncio
async def test_a_row_whose_sort_key_moved_is_placed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = make_runs()
    app = RMConsoleApp(refresh_s=3600, reap_every_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        screen, table = await settled(app, pilot, N_RUNS)
        screen.set_sort("status")  # finished before running, each by id
        await pilot.pause()
        finishing = ids[6]
        table.move_cursor(row=table.get_row_index(str(finishing)))
        app.toggle_selected(ids[1])
        feed = data.RunsFeed()
        feed.read()
        store.update_run(finishing, status="finished", phase="done", metrics={"A_last": 99.0, "tasks_done": 5})
        store.update_run(ids[9], phase_done=70)  # progress only: stays where it is
        rows, changed = feed.read()
        assert feed.delta is not None and {r.id for r in feed.delta.updated} == {finishing, ids[9]}
        sorted_ = counting(monkeypatch, table, "sort")
        screen.on_runs_loaded(RunsLoaded(rows, changed, feed.delta))
        await pilot.pause()
        assert len(sorted_) == 1  # re-sorted once: a row moved
        assert table_ids(table) == [r.id for r in data.arrange(rows, "", "status", False)]
        assert table.cursor_run_id == finishing  # the cursor followed its run
        assert table.get_cell(str(finishing), "A_last").plain == "99.00"
        assert table.get_cell(str(ids[1]), "sel").plain == "●"  # the selection kept across the refresh


def test_arrangement_update_agrees_with_arranging_everything() -> None:
    """Random changes of status, metrics and names, under every sort and a few filters: placing
    only the changed rows gives what arranging every row anew gives, and says when a row moved."""
    make_runs(20)
    rng = random.Random(7)
    feed = data.RunsFeed()
    rows, _ = feed.read()
    views = [
        data.Arrangement(rows, query, sort, descending)
        for sort in data.sort_columns()
        for descending in (True, False)
        for query in ("", "status:running", "study", "A_last>60")
    ]
    moved_seen = in_place_seen = False
    for step in range(12):
        for run_id in rng.sample([r.id for r in rows], 3):
            what = rng.choice(["progress", "finish", "metric", "name", "archive"])
            if what == "progress":
                store.update_run(run_id, phase_done=rng.randrange(100))
            elif what == "finish":
                store.update_run(run_id, status=rng.choice(["finished", "running", "failed"]))
            elif what == "metric":
                store.update_run(run_id, metrics={"A_last": rng.uniform(40, 90), "tasks_done": rng.choice([2, 5])})
            elif what == "name":
                store.update_run(run_id, name=rng.choice([None, "study b", "alpha"]))
            else:
                store.update_run(run_id, archived_at=rng.choice([None, store.utcnow()]))
        rows, _ = feed.read()
        assert feed.delta is not None
        for view in views:
            query, sort, descending, archived = view.key
            before = [r.id for r in view.rows]
            moved = view.update(feed.delta.updated, feed.delta.gone)
            expected = data.arrange(rows, query, sort, descending, archived)
            assert [r.id for r in view.rows] == [r.id for r in expected], (step, view.key)
            assert all(a is b for a, b in zip(view.rows, expected))  # the new row objects, not stale ones
            if not moved:
                assert [r.id for r in view.rows] == before
            moved_seen |= moved
            in_place_seen |= not moved
    assert moved_seen and in_place_seen  # both paths were taken


def test_the_feed_names_new_and_deleted_runs() -> None:
    ids = make_runs(4)
    feed = data.RunsFeed()
    feed.read()
    assert feed.delta is None  # the first read: every row
    rows, changed = feed.read()
    assert not changed and feed.delta == data.RunsDelta()
    _, cfg = load_config("digits-blurry10-online", {"epochs": 1})
    new = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    assert store.delete_run(ids[1]).applied
    rows, changed = feed.read()
    assert changed and feed.delta is not None
    assert [r.id for r in feed.delta.updated] == [new] and feed.delta.gone == (ids[1],)
    assert [r.id for r in rows] == sorted({*ids, new} - {ids[1]})
    beat = store.utcnow()
    store.update_run(ids[0], heartbeat_at=beat, phase_done=42)  # a live run's columns only
    feed.read()
    assert feed.delta is not None and [r.id for r in feed.delta.updated] == [ids[0]]
    live = feed.rows[ids[0]]  # (its known record, the live columns replaced: times parsed from the row)
    assert live.heartbeat_at == beat and live.heartbeat_at.tzinfo is not None
    assert live == store.run_record(ids[0])  # what a whole read gives
