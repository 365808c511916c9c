"""The validation stream (issue 30): `val_fraction` holds out a share of each class's training
samples, seeded by a generator of its own; they are never trained on and never in the memory;
validation accuracy is measured where test accuracy is and stored beside it; the catalogue's
val_A_* rows read it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from support.online_helpers import config as tf_config
from support.online_helpers import tiny_data

from rmconsole.cl import streams
from rmconsole.cl.data import load_digits
from rmconsole.cl.events import Reporter
from rmconsole.cl.loop import build_protocol, run_protocol
from rmconsole.cl.online import build_online_protocol, run_online
from rmconsole.config import ConfigError, load_config


class Watch(Reporter):
    """Records outcomes, anytime points, the held-out info, and the memory after every task."""

    def __init__(self) -> None:
        self.outcomes: list[Any] = []
        self.points: list[Any] = []
        self.info: dict[str, Any] | None = None
        self.memories: list[set[int]] = []

    def validation_held_out(self, info: dict[str, Any]) -> None:
        self.info = info

    def anytime_evaluated(self, point: Any) -> None:
        self.points.append(point)

    def task_finished(self, outcome: Any, checkpoint: Any) -> None:
        self.outcomes.append(outcome)
        self.memories.append(memory_indices(checkpoint["method"]))


def memory_indices(state: Any) -> set[int]:
    """Every train index held in a method's saved memory (any nesting of dicts)."""
    found: set[int] = set()
    if isinstance(state, dict):
        if "indices" in state and isinstance(state["indices"], torch.Tensor):
            found |= set(state["indices"].flatten().tolist())
        for value in state.values():
            found |= memory_indices(value)
    return found


def taken_train_indices(monkeypatch: pytest.MonkeyPatch, data: Any) -> list[int]:
    """Every train index the METHOD asks images of (training batches, memory scoring), wrapping
    the train split's `take`; the validation pass's reads are the protocol's and not counted."""
    import rmconsole.cl.inference as inference
    from rmconsole.cl.images import TensorImages

    taken: list[int] = []
    train_images = data.train.images.data_ptr()  # (the driver's `data.to(cpu)` keeps the tensor)
    real = TensorImages.take
    evaluating = {"on": False}

    def take(self: TensorImages, idx: torch.Tensor) -> torch.Tensor:
        if self.images.data_ptr() == train_images and not evaluating["on"]:
            taken.extend(idx.flatten().cpu().tolist())
        return real(self, idx)

    monkeypatch.setattr(TensorImages, "take", take)
    real_validation = inference.validation

    def validation(*args: Any, **kwargs: Any) -> Any:
        evaluating["on"] = True
        try:
            return real_validation(*args, **kwargs)
        finally:
            evaluating["on"] = False

    import rmconsole.cl.online as online
    import rmconsole.cl.resume as resume  # (the drivers' shared validation pass after a task)

    monkeypatch.setattr(resume, "validation", validation)
    monkeypatch.setattr(online, "validation", validation)
    return taken


def held_of(protocol: Any) -> list[int]:
    held = protocol.held_out
    assert held is not None
    return held.validation.tolist()


# ---------------------------------------------------------------------- the split


def test_hold_out_exact_per_class_sizes_and_determinism() -> None:
    labels = torch.tensor([0] * 100 + [1] * 37 + [2] * 3 + [3] * 1)[
        torch.randperm(141, generator=torch.Generator().manual_seed(5))
    ]
    held = streams.hold_out(labels, 0.2, seed=1)
    per_class = torch.bincount(labels[held.validation], minlength=4).tolist()
    assert per_class == [20, 7, 1, 0]  # round(n_c * 0.2), per class
    assert len(held.train) + len(held.validation) == 141
    assert not set(held.train.tolist()) & set(held.validation.tolist())
    again = streams.hold_out(labels, 0.2, seed=1)
    assert torch.equal(again.validation, held.validation) and torch.equal(again.train, held.train)
    other = streams.hold_out(labels, 0.2, seed=2)
    assert not torch.equal(other.validation, held.validation)
    none = streams.hold_out(labels, 0.0, seed=1)
    assert none.empty and torch.equal(none.train, torch.arange(141))


def test_zero_fraction_stream_is_todays_stream() -> None:
    """val_fraction=0: the task streams are bit-identical to those built without the key."""
    data = load_digits()
    _, cfg = load_config(None, {"val_fraction": 0.0})
    protocol = build_protocol(cfg, data)
    order = streams.class_order(data.name, data.n_classes, cfg.seed, cfg.class_order)
    labels = streams.remap_labels(data.train.labels.cpu(), order)
    today = streams.make_tasks(labels, cfg.n_tasks, data.n_classes, cfg.blurry, cfg.seed)
    assert protocol.held_out is None
    assert all(torch.equal(a, b) for a, b in zip(protocol.tasks, today))


@pytest.mark.parametrize("stream", ["online", "iblurry"])
def test_held_out_samples_are_out_of_every_task_stream(stream: str) -> None:
    if stream == "online":
        data = load_digits()
        _, cfg = load_config(None, {"val_fraction": 0.25, "blurry": 10})
        protocol: Any = build_protocol(cfg, data)
    else:
        data = tiny_data()
        cfg = tf_config(val_fraction=0.25)
        protocol = build_online_protocol(cfg, data)
    held = protocol.held_out
    assert held is not None
    val = set(held.validation.tolist())
    in_stream = set(torch.cat(protocol.tasks).tolist())
    assert not val & in_stream
    counts = torch.bincount(data.train.labels).tolist()
    assert torch.bincount(data.train.labels[held.validation], minlength=len(counts)).tolist() == [
        round(n * 0.25) for n in counts
    ]


# ---------------------------------------------------------------------- never trained on, never in memory


@pytest.mark.parametrize("method", ["rm", "er"])
def test_validation_never_trained_on_nor_in_memory_task_protocol(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = load_digits()
    _, cfg = load_config(None, {"method": method, "epochs": 1, "val_fraction": 0.2, "n_tasks": 2, "threads": 1})
    taken = taken_train_indices(monkeypatch, data)
    watch = Watch()
    run_protocol(cfg, data, torch.device("cpu"), watch)
    val = set(held_of(build_protocol(cfg, data)))
    assert taken and not val & set(taken), "held-out samples were read for training"
    assert all(memory and not val & memory for memory in watch.memories), "held-out samples entered the memory"
    assert watch.info is not None and watch.info["samples"] == len(val)
    assert all(o.val_accuracy is not None and 0 <= o.val_accuracy <= 100 for o in watch.outcomes)
    assert all(len(o.val_accuracy_row) == 2 for o in watch.outcomes)


def test_validation_never_trained_on_nor_in_memory_task_free(monkeypatch: pytest.MonkeyPatch) -> None:
    data = tiny_data()
    cfg = tf_config(method="er", val_fraction=0.2, n_tasks=2)
    taken = taken_train_indices(monkeypatch, data)
    watch = Watch()
    run_online(cfg, data, torch.device("cpu"), watch)
    val = set(held_of(build_online_protocol(cfg, data)))
    assert taken and not val & set(taken)
    assert all(memory and not val & memory for memory in watch.memories)
    assert watch.points and all(p.val_accuracy is not None for p in watch.points)
    assert all(o.val_accuracy is not None for o in watch.outcomes)


def test_the_never_trained_check_bites(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the split on purpose (the stream keeps the held-out samples): the check fails."""
    data = load_digits()
    _, cfg = load_config(None, {"method": "er", "epochs": 1, "val_fraction": 0.2, "n_tasks": 2, "threads": 1})
    real = streams.HeldOut.restrict
    monkeypatch.setattr(
        streams.HeldOut,
        "restrict",
        lambda self, tasks: [torch.cat([t, self.validation[i :: len(tasks)]]) for i, t in enumerate(real(self, tasks))],
    )
    taken = taken_train_indices(monkeypatch, data)
    watch = Watch()
    run_protocol(cfg, data, torch.device("cpu"), watch)
    val = set(held_of(build_protocol(cfg, data)))
    assert val & set(taken)
    assert any(val & memory for memory in watch.memories)


# ---------------------------------------------------------------------- the key


@pytest.mark.parametrize("value", ["0.5", "-0.1", "abc", "nan", "0.9"])
def test_val_fraction_refused_in_one_line(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"val_fraction={value}"])
    text = str(err.value)
    assert "val_fraction" in text and "\n" not in text


def test_val_fraction_recorded_in_stream_identity() -> None:
    """The held-out share changes the stream hashes, and a checkpoint of another split is refused."""
    from rmconsole.cl.resume import CheckpointMismatch, restore

    data = load_digits()
    _, plain = load_config(None, {})
    _, held = load_config(None, {"val_fraction": 0.1})
    a, b = build_protocol(plain, data), build_protocol(held, data)
    assert [p.stream_hash for p in a.plans(10)] != [p.stream_hash for p in b.plans(10)]
    with pytest.raises(CheckpointMismatch, match="validation split"):
        nothing: Any = None  # (refused before the method or the augmenter is touched)
        restore(
            {"task": 0, "method_name": "rm", "stream_hashes": [p.stream_hash for p in b.plans(10)]},
            held,
            b,
            nothing,
            nothing,
            torch.device("cpu"),
        )


# ---------------------------------------------------------------------- stored beside test


def _stored_run(overrides: dict[str, Any], test: list[float], val: list[float] | None, seed: int = 1) -> int:
    """A finished 2-task run in the store with these per-task test (and validation) accuracies."""
    from rmconsole import store
    from rmconsole.cl.events import TaskOutcome, TaskPlan

    _, cfg = load_config(None, {"n_tasks": 2, "seed": seed, **overrides})
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    store.record_start(run_id, [TaskPlan(t, 100, [t], [50, 50], f"h{t}") for t in range(2)], [0, 1], ["a", "b"], [])
    for t in range(2):
        held = {} if val is None else dict.fromkeys(("val_accuracy_row", "val_class_accuracy"), [val[t]] * 2)
        figures = {**held, "val_accuracy": val[t]} if val is not None else {}
        store.record_task(run_id, TaskOutcome(t, test[t], [test[t]] * 2, [test[t]] * 2, [0, 1], 1.0, **figures))
    store.update_run(run_id, status="finished")
    return run_id


def test_validation_metrics_stored_and_read() -> None:
    from rmconsole import store

    with_val = _stored_run({"val_fraction": 0.1}, [50.0, 70.0], [55.0, 75.0])
    without = _stored_run({}, [50.0, 70.0], None)
    metrics = store.run_record(with_val).metrics
    assert metrics["A_last"] == 70.0 and metrics["val_A_last"] == 75.0 and metrics["val_A_avg"] == 65.0
    assert "val_A_last" not in store.run_record(without).metrics  # absent, not 0
    detail = store.run_detail(with_val)
    assert [t["val_accuracy"] for t in detail["tasks"]] == [55.0, 75.0]
    assert "val_accuracy" not in store.run_detail(without)["tasks"][0]


def test_task_free_anytime_validation_stored() -> None:
    from rmconsole import store
    from rmconsole.cl.events import AnytimePoint

    run_id = _stored_run(
        {"val_fraction": 0.1, "stream": "iblurry", "schedule": "exp_reset", "optimizer": "adam"},
        [50.0, 70.0],
        [55.0, 75.0],
    )
    store.record_anytime(
        run_id, [AnytimePoint(0, 100, 40.0, 2, None, 0.1, 42.0), AnytimePoint(1, 200, 60.0, 2, None, 0.1, 64.0)]
    )
    metrics = store.run_record(run_id).metrics
    assert metrics["A_auc"] == 50.0 and metrics["val_A_auc"] == 53.0
    assert [a["val_accuracy"] for a in store.run_detail(run_id)["anytime"]] == [42.0, 64.0]


def test_a_store_without_the_validation_columns_still_opens() -> None:
    from rmconsole import store
    from rmconsole.store import db

    run_id = _stored_run({}, [50.0, 70.0], None)
    with db.get_engine().begin() as conn:  # as an rmconsole before issue 30 left it
        for table, column in (
            ("taskresult", "val_accuracy"),
            ("taskresult", "val_accuracy_row"),
            ("taskresult", "val_class_accuracy"),
            ("anytimeeval", "val_accuracy"),
            ("run", "validation"),
        ):
            conn.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.exec_driver_sql("DROP TABLE rmconsole_schema_version")  # (no versions before issue 39)
    db.dispose_engines()
    assert store.run_record(run_id).metrics["A_last"] == 70.0
    assert store.task_results(run_id)[0].val_accuracy is None
    assert store.run_detail(run_id)["validation"] is None


# ---------------------------------------------------------------------- selection by validation


def test_select_by_picks_the_validation_best_not_the_test_best() -> None:
    from rmconsole import store
    from rmconsole.report.select_by import select

    # ewc: lr=0.01 is best on validation, lr=0.1 best on test; rm: one configuration
    for seed, (v1, t1, v2, t2) in enumerate([(80, 60, 70, 90), (82, 62, 71, 91)], start=1):
        _stored_run({"method": "ewc", "lr": 0.01, "val_fraction": 0.1}, [0, t1], [0, v1], seed)
        _stored_run({"method": "ewc", "lr": 0.1, "val_fraction": 0.1}, [0, t2], [0, v2], seed)
    _stored_run({"method": "rm", "val_fraction": 0.1}, [0, 50], [0, 55])
    runs = [r.to_json() for r in store.find_runs()]
    chosen = select(runs, "val_A_last", ["method"])
    by_method = {c.group[0][1]: c for c in chosen.choices}
    ewc = by_method["ewc"]
    assert ewc.chosen is not None and dict(ewc.chosen.values) == {"lr": 0.01}
    assert ewc.chosen.score == 81.0 and len(ewc.configurations) == 2
    assert sorted(r["metrics"]["A_last"] for r in chosen.runs if r["method"] == "ewc") == [60, 62]
    assert "selected lr=0.01 (val_A_last 81.00 over 2 seeds) among 2 configurations" in ewc.line("val_A_last")
    assert by_method["rm"].chosen is not None and len(by_method["rm"].configurations) == 1


def test_select_by_refuses_a_test_metric_in_one_line() -> None:
    from rmconsole.report.select_by import SelectionError, select

    for name, words in (("A_last", "test set"), ("nope", "not a metric")):
        with pytest.raises(SelectionError) as err:
            select([{"id": 1}], name)
        assert words in str(err.value) and "\n" not in str(err.value) and "val_A_last" in str(err.value)


def test_select_by_without_validation_runs_says_so() -> None:
    from rmconsole import store
    from rmconsole.report.select_by import SelectionError, select

    _stored_run({}, [50.0, 70.0], None)
    with pytest.raises(SelectionError, match="val_fraction > 0"):
        select([r.to_json() for r in store.find_runs()], "val_A_last")


def test_validation_curves_for_pruning() -> None:
    from rmconsole import store
    from rmconsole.cl.events import AnytimePoint

    with_val = _stored_run({"val_fraction": 0.1}, [50.0, 70.0], [55.0, 75.0])
    without = _stored_run({}, [50.0, 70.0], None)
    assert store.validation_curves([with_val, without]) == {with_val: [55.0, 75.0], without: [None, None]}
    store.record_anytime(with_val, [AnytimePoint(0, 100, 40.0, 2, None, 0.1, 42.0)])
    assert store.anytime_validation_curves([with_val]) == {with_val: [(100, 42.0)]}


# ---------------------------------------------------------------------- the faces


def test_report_select_by_and_show_and_diff_faces() -> None:
    """`report --select-by` prints the val-best configuration's test figures and a line saying what
    was selected among how many; a test metric is refused in one line; `show` and `diff` put
    validation beside test."""
    from support.cli import in_process

    ids = []
    for seed, (v1, t1, v2, t2) in enumerate([(80, 60, 70, 90), (82, 62, 71, 91)], start=1):
        ids.append(_stored_run({"method": "ewc", "lr": 0.01, "val_fraction": 0.1}, [0, t1], [0, v1], seed))
        ids.append(_stored_run({"method": "ewc", "lr": 0.1, "val_fraction": 0.1}, [0, t2], [0, v2], seed))
    done = in_process("report", "--select-by", "val_A_last", "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert (
        "61.0" in done.stdout and "90.5" not in done.stdout
    )  # the val-best's test A_last (60, 62), not the test-best's
    assert "method=ewc: selected lr=0.01 (val_A_last 81.00 over 2 seeds) among 2 configurations" in done.stderr
    table = in_process("report", "--select-by", "val_A_last")
    assert table.returncode == 0 and "among 2 configurations" in table.stdout and "A_last (val)" in table.stdout
    refused = in_process("report", "--select-by", "A_last")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "test set" in refused.stderr
    show = in_process("show", str(ids[0]))
    assert show.returncode == 0 and "val %" in show.stdout and "A_last (val) 80.00" in show.stdout
    diff = in_process("diff", str(ids[0]), str(ids[1]))
    assert diff.returncode == 0 and "val after T2" in diff.stdout and "val_A_last" in diff.stdout


def test_runs_lists_the_validation_figures_when_a_run_has_them() -> None:
    """Issue 42: a `tune` trial evaluates no test set; `runs` showed its A_last — and nothing else."""
    from support.cli import in_process

    without = _stored_run({}, [50.0, 70.0], None)
    assert "(val)" not in in_process("runs").stdout
    with_val = _stored_run({"val_fraction": 0.1}, [50.0, 70.0], [55.0, 75.0])
    listed = in_process("runs").stdout
    assert "A_last (val)" in listed and "A_avg (val)" in listed
    row = next(line for line in listed.splitlines() if line.strip().startswith(str(with_val)))
    assert row.split()[-2:] == ["75.00", "65.00"]
    assert next(line for line in listed.splitlines() if line.strip().startswith(str(without))).split()[-2:] == [
        "—",
        "—",
    ]
