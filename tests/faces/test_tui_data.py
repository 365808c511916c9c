"""The TUI's data layer and drawing functions, without a terminal."""

from __future__ import annotations

import pytest
from support import tui_store

from rmconsole import store
from rmconsole.cl.metric_catalog import CrossValue
from rmconsole.config import ConfigError
from rmconsole.runner import launch
from rmconsole.tui import data, render
from rmconsole.tui.screens.launch import preview, split_overrides

pytestmark = pytest.mark.usefixtures("store_backend")  # each test on SQLite and on PostgreSQL


def test_run_rows_read_every_run_with_progress_and_metrics() -> None:
    ids = tui_store.build()
    rows = {r.id: r for r in data.load_run_rows()}
    assert set(rows) == set(ids.values())
    finished, running = rows[ids["finished"]], rows[ids["running"]]
    assert finished.status == "finished" and finished.value("A_last") == pytest.approx(86.0)
    assert finished.tasks_done == 5 and finished.value("F_last") is not None and finished.value("I_last") is None
    assert running.active and (running.task, running.phase, running.phase_fraction) == (
        2,
        "stream",
        pytest.approx(230 / 576),
    )
    assert running.memory_size == 200 and running.seed == 2
    assert render.progress_text(running).plain == "3/5 stream  40%"
    assert render.progress_text(finished).plain == "5/5 tasks"
    assert render.progress_text(rows[ids["queued"]]).plain == "waiting"


def test_i_last_matches_a_finished_joint_run_with_the_same_budget() -> None:
    ids = tui_store.build()
    finished = store.get_run(ids["finished"])
    joint = store.create_run({**finished.config, "method": "joint"}, "joint")
    store.update_run(joint, status="finished", metrics={"A_last": 95.0})
    rows = {r.id: r for r in data.load_run_rows()}
    assert rows[ids["finished"]].value("I_last") == pytest.approx(95.0 - 86.0)
    assert rows[ids["running"]].value("I_last") is None  # different epochs and seed: no matching joint run
    assert data.load_run_view(ids["finished"]).row.value("I_last") == pytest.approx(
        9.0
    )  # the store's own lookup agrees


def test_runs_feed_rereads_only_what_can_change(monkeypatch) -> None:
    ids = tui_store.build()
    feed = data.RunsFeed()
    rows, changed = feed.read()
    assert changed and len(rows) == 4
    asked: list[set[int]] = []
    real = store.live_records  # (a known run's live columns only; whole rows for the rest)
    monkeypatch.setattr(
        data.store, "live_records", lambda known, texts, ids: asked.append(set(ids)) or real(known, texts, ids)
    )
    rows, changed = feed.read()
    assert not changed and asked[-1] == {ids["running"], ids["queued"]}  # only the active runs are re-read
    store.update_run(ids["running"], phase_done=300)
    assert feed.read()[1] and feed.rows[ids["running"]].phase_done == 300
    store.update_run(ids["running"], status="finished")  # its status changed: read once more...
    assert feed.read()[1] and feed.rows[ids["running"]].status == "finished"
    assert asked[-1] == {ids["running"], ids["queued"]}
    feed.read()
    assert asked[-1] == {ids["queued"]}  # ...then no more
    store.update_run(ids["failed"], status="queued")  # a resumed run becomes active again
    assert feed.read()[1] and feed.rows[ids["failed"]].status == "queued"
    store.write(lambda s: s.delete(s.get(store.Run, ids["queued"])))
    rows, changed = feed.read()
    assert changed and ids["queued"] not in {r.id for r in rows}
    joint = store.create_run({**store.get_run(ids["finished"]).config, "method": "joint"}, "joint")
    store.update_run(joint, status="finished", metrics={"A_last": 90.0})
    rows, changed = feed.read()
    assert changed and feed.rows[ids["finished"]].value("I_last") == pytest.approx(
        4.0
    )  # a new joint run updates I_last


def test_filter_terms_and_fields_then_sort() -> None:
    ids = tui_store.build()
    rows = data.load_run_rows()
    assert [r.id for r in data.arrange(rows, "status:running", "id", True)] == [ids["running"]]
    assert [r.id for r in data.arrange(rows, "finetune", "id", True)] == [ids["failed"]]
    assert [r.id for r in data.arrange(rows, "digits seed:3", "id", True)] == [ids["queued"]]
    assert data.arrange(rows, "seed:99", "id", True) == []
    with pytest.raises(data.FilterError, match="unknown status 'nothing'; allowed: queued, running"):
        data.arrange(rows, "status:nothing", "id", True)  # a closed set: refused on the status line, as in the CLI
    assert [r.id for r in data.arrange(rows, "", "id", True)] == sorted(ids.values(), reverse=True)
    by_a_last = [r.id for r in data.arrange(rows, "", "A_last", True)]
    assert by_a_last[0] == ids["finished"]  # 86.0 is the best A_last; runs without one sort last
    assert by_a_last[-1] == ids["queued"]
    # the running and the failed run have partial A_last (after task 2 and 1 of 5): after the final one
    assert by_a_last == [ids["finished"], ids["running"], ids["failed"], ids["queued"]]
    assert [r.id for r in data.arrange(rows, "", "A_last", False)][:1] == [ids["finished"]]  # either way


def test_run_view_has_stream_results_memory_and_uncertainty() -> None:
    ids = tui_store.build()
    view = data.load_run_view(ids["running"])
    assert len(view.streams) == 5 and view.streams[1].major_classes == (2, 3)
    assert [r.task for r in view.results] == [0, 1]
    assert len(view.memory) == 3 and view.memory[0].candidates_uncertainty is None
    assert view.memory[2].chosen_uncertainty and sum(view.memory[2].chosen_uncertainty) == 200
    assert view.class_labels == tuple(str(c) for c in tui_store.CLASS_ORDER)
    assert view.accuracy_matrix[1] == tui_store.ACCURACY_ROWS[1]
    assert view == data.load_run_view(ids["running"])  # equal reads: the screen skips repainting
    with pytest.raises(data.RunGone):
        data.load_run_view(999)


def test_run_feed_rereads_results_and_memory_only_when_they_change(monkeypatch) -> None:
    ids = tui_store.build()
    feed = data.RunFeed(ids["running"])
    first = feed.read()
    again = feed.read()
    assert again == first and again.memory is first.memory and again.streams is first.streams  # cached
    store.update_run(ids["running"], phase_done=400)
    moved = feed.read()
    assert moved.row.phase_done == 400 and moved.results is first.results
    store.record_task(ids["running"], tui_store._outcome(2))
    store.record_memory(ids["running"], 3, tui_store.memory_histogram(3), 25, {"policy": "uncertainty"})
    grown = feed.read()
    assert len(grown.results) == 3 and len(grown.memory) == 4
    store.delete_results_from(ids["running"], 1)  # as a resume does
    assert len(feed.read().results) == 1 and len(feed.read().memory) == 1


def test_compare_view_curves_differences_and_missing_runs() -> None:
    ids = tui_store.build()
    view = data.load_compare([ids["finished"], ids["running"], 999])
    assert [r.id for r in view.rows] == [ids["finished"], ids["running"]]
    assert view.curves[ids["finished"]] == tuple(tui_store.ACCURACIES)
    assert view.curves[ids["running"]] == tuple(tui_store.ACCURACIES[:2])
    assert view.differences["seed"] == ("1", "2") and view.differences["epochs"] == ("8", "32")
    assert "dataset" not in view.differences
    assert view.missing == (999,)


def test_log_tail_reads_the_tail_then_appended_lines(tmp_path) -> None:
    path = tmp_path / "w.log"
    tail = data.LogTail(path)
    assert tail.read_new() == []  # no file yet
    path.write_text("x" * (data.LOG_TAIL_BYTES + 10) + "\nfirst\nsecond\npart")
    assert tail.read_new() == ["first", "second"]  # the cut first line and the unfinished last are held back
    with open(path, "a") as f:
        f.write("ial\nthird\n")
    assert tail.read_new() == ["partial", "third"]
    assert tail.read_new() == []
    path.write_text("rewritten\n")  # shrank: read again from its start
    assert tail.read_new() == ["rewritten"]


def test_stream_bar_splits_the_task_into_major_classes_and_minor_samples() -> None:
    task = data.StreamTask(0, 288, (0, 1), (131, 133, 4, 2, 2, 2, 2, 2, 3, 7))
    bar = render.stream_bar(task, 20, 288, "done")
    assert len(bar.plain) == 20 and bar.plain == "█" * 20
    colours = [str(s.style) for s in bar.spans]
    assert colours[0] == render.class_colour(0) and "grey50" in colours[-1]
    half = render.stream_bar(task, 20, 288, "current", position=0.5)
    assert half.plain == "█" * 10 + "░" * 10
    shorter = render.stream_bar(data.StreamTask(1, 144, (2, 3), (0, 0, 70, 70, 4, 0, 0, 0, 0, 0)), 20, 288, "planned")
    assert shorter.plain.rstrip() == "█" * 10
    counts = render.stream_counts(task, [str(c) for c in range(10)]).plain
    assert counts == "0:131 1:133 +24 minor (8 cls)"


def test_memory_chart_draws_each_class_against_the_slot_line() -> None:
    info = {"policy": "uncertainty", "views": 12, "candidates_uncertainty": [5, 10, 20, 10, 5]}
    update = data.MemoryUpdate(
        1, (40, 30, 20, 20, 20, 20, 20, 20, 5, 5), 20, {**info, "chosen_uncertainty": [2, 4, 8, 4, 2]}
    )
    chart = render.memory_chart(update, [str(c) for c in range(10)], 60, 8).plain.splitlines()
    assert len(chart) == 9  # 8 rows + the class labels
    assert chart[0].startswith("40┤") and any(line.startswith("20┤") and "╌" in line for line in chart)
    assert chart[-1].split() == [str(c) for c in range(10)]
    spread = render.uncertainty_chart(update, 60).plain
    assert "chosen 20 0.50±0.27" in spread and "candidates 50 0.50±0.27" in spread  # std of 2,4,8,4,2 over u=0..1
    assert spread.splitlines()[-1].split() == ["certain", "uncertain"]
    many = data.MemoryUpdate(1, tuple(range(200)), 5, {"policy": "random"})
    assert "mean of 4 classes" in render.memory_chart(many, [], 60, 6).plain


def test_accuracy_matrix_and_metrics_line() -> None:
    table = render.accuracy_matrix([[90.0, None], [80.0, 70.0]], [90.0, 75.0], 3)
    assert table.row_count == 3 and len(table.columns) == 5
    row = data.RunRow(
        id=1,
        status="finished",
        preset=None,
        method="rm",
        dataset="digits",
        memory_size=200,
        seed=1,
        n_tasks=5,
        task=4,
        phase=None,
        phase_done=0,
        phase_total=0,
        samples_per_s=None,
        eta_s=None,
        metrics={"A_last": 80.0, "A_avg": 60.0, "F_last": 10.0},
        tasks_done=5,
        sweep_id=None,
        error=None,
        created_at=None,
        heartbeat_at=None,
    )
    line = render.metrics_line(row).plain
    assert "A_last 80.00" in line and "F_last 10.00" in line and "I_last —" in line


def test_launch_preview_marks_overrides_and_refuses_bad_values() -> None:
    config, sources, what = preview("digits-blurry10-online", "epochs=2 seed=7")
    assert config["epochs"] == 2 and config["seed"] == 7 and what == "one run"
    assert sources["epochs"] == "override" and sources["dataset"] == "preset" and sources["lr"] == "preset"
    assert sources["weight_decay"] == "default"
    with pytest.raises(ConfigError, match="unknown config key 'colour'"):
        preview("digits-blurry10-online", "colour=blue")
    with pytest.raises(ConfigError, match="memory_size=-1"):
        preview("digits-blurry10-online", "memory_size=-1")
    assert split_overrides("augment=cutmix+autoaug lr=0.1") == ["augment=cutmix+autoaug", "lr=0.1"]
    config, sources, what = preview("digits-blurry10-online", "method=rm,er epochs=2", "1,2")
    assert what.startswith("a sweep of 4 runs") and sources["method"] == sources["seed"] == "sweep axis"
    assert sources["epochs"] == "override" and config["method"] == "rm"
    with pytest.raises(ConfigError, match="seeds"):
        preview("digits-blurry10-online", "", "1,x")
    config, sources, what = preview("digits-blurry10-online", "epochs=2", "3")  # one seed: one run, not a sweep
    assert what == "one run" and config["seed"] == 3 and sources["seed"] == "override"
    # the form lists the run's own keys: the common ones, then its method's
    config, sources, _ = preview("digits-blurry10-online", "method=bic bic_temperature=3")
    assert config["bic_temperature"] == 3 and sources["bic_temperature"] == "override" and "rm_variant" not in config
    assert sources["bic_val_fraction"] == "default"
    with pytest.raises(ConfigError, match=r"^bic_temperature=3: read by bic, bic_star, not by method=rm$"):
        preview("digits-blurry10-online", "bic_temperature=3")


def test_launch_run_refuses_before_storing(isolated_home) -> None:
    with pytest.raises(ConfigError):
        launch.launch_run("digits-blurry10-online", ["epochs=-3"])
    with pytest.raises(ConfigError):
        launch.launch_run("no-such-preset", [])
    assert store.list_runs() == []


def test_metrics_line_marks_i_last_and_shows_the_paper_and_top_k() -> None:
    """The run page: I_last against a joint run with another augmentation is `16.00*` with the note;
    an MNIST RM run shows the paper's 91.80 with the difference; a top-5 run its top-5 figures."""
    config = {
        "dataset": "mnist",
        "method": "rm",
        "memory_size": 500,
        "n_tasks": 5,
        "blurry": 10,
        "stream": "online",
        "augment": ["cutmix", "autoaug"],
        "uncertainty": "randaug",
        "model": "mlp400",
        "epochs": 256,
    }
    row = data.RunRow(
        id=1,
        status="finished",
        preset=None,
        method="rm",
        dataset="mnist",
        memory_size=500,
        seed=1,
        n_tasks=5,
        task=4,
        phase=None,
        phase_done=0,
        phase_total=0,
        samples_per_s=None,
        eta_s=None,
        metrics={"A_last": 80.0, "A_avg": 60.0, "F_last": 1.0, "I_last": 16.0},
        tasks_done=5,
        sweep_id=None,
        error=None,
        config=config,
        cross={"I_last": CrossValue(16.0, 7, (("augment", ["cutmix", "autoaug"], []),))},
    )
    line = render.metrics_line(row).plain
    assert "I_last 16.00*" in line
    assert "* I_last against joint run 7, which differs in augment cutmix+autoaug here, none there" in line
    assert "paper A_last 91.80 (Δ -11.80)" in line and "F_last 0.75 (Δ +0.25)" in line and "I_last 3.62" in line
    top5 = data.RunRow(
        id=2,
        status="finished",
        preset=None,
        method="rm",
        dataset="imagenet",
        memory_size=20000,
        seed=1,
        n_tasks=10,
        task=9,
        phase=None,
        phase_done=0,
        phase_total=0,
        samples_per_s=None,
        eta_s=None,
        metrics={
            "A_last": 30.0,
            "A_avg": 20.0,
            "F_last": 1.0,
            "A_last_topk": 52.0,
            "A_avg_topk": 40.0,
            "F_last_topk": 2.0,
        },
        tasks_done=10,
        sweep_id=None,
        error=None,
        topk=5,
        config={
            **config,
            "dataset": "imagenet",
            "memory_size": 20000,
            "n_tasks": 10,
            "topk": 5,
            "model": "resnet34",
            "epochs": 100,
        },
    )
    line = render.metrics_line(top5).plain
    assert "top-5 A_last 52.00" in line and "A_last top-5 50.11 (Δ +1.89)" in line and "paper A_last 50" not in line
