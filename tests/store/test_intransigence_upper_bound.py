"""I_last: which joint run is a run's upper bound, and I_last in `runs` and `show`."""

from __future__ import annotations

import json

import pytest
from conftest import rmconsole
from support.cli import in_process

from rmconsole import store
from rmconsole.cl.events import TaskOutcome
from rmconsole.config import load_config


def _stored(method: str, a_last: float, status: str = "finished", **overrides) -> int:
    _, cfg = load_config(None, {"method": method, **overrides})
    run_id = store.create_run(cfg.to_dict(), f"{method}-preset")
    store.record_task(run_id, TaskOutcome(0, a_last, [a_last], [a_last] * 10, list(range(10)), 1.0))
    store.update_run(run_id, status=status, n_tasks=1)  # one task, all of it done: final metrics
    return run_id


def test_joint_matching_rules() -> None:
    run = _stored("ewc", 80.0, augment="none", epochs=256)
    assert store.run_detail(run)["metrics"]["I_last"] is None  # no joint run yet
    _stored("joint", 99.0, model="mlp400", seed=2)  # another seed: not this run's upper bound
    _stored("joint", 98.0, status="failed")  # unfinished joint runs do not count
    assert store.run_detail(run)["metrics"]["I_last"] is None
    other_budget = _stored("joint", 95.0, augment="cutmix", epochs=8, batch_size=64)
    metrics = store.run_detail(run)["metrics"]
    assert metrics["I_last"] == 15.0 and metrics["I_last_joint_run"] == other_budget  # its own budget is fine
    same_augment = _stored("joint", 96.0, augment="none", epochs=16)
    _stored("joint", 97.0, augment="cutmix", epochs=16)  # newer, but a different augmentation
    metrics = store.run_detail(run)["metrics"]
    assert metrics["I_last"] == 16.0 and metrics["I_last_joint_run"] == same_augment
    joint_detail = store.run_detail(same_augment)
    assert joint_detail["metrics"]["I_last"] is None  # the upper bound has no intransigence


@pytest.mark.slow  # three real runs; the joint-run rule itself: test_every_view_takes_the_same_joint_run
@pytest.mark.full  # 28 s of a worker, not in CI
def test_i_last_in_runs_and_show(isolated_home) -> None:
    joint = rmconsole(
        "run", "--set", "method=joint", "--set", "epochs=2", "--set", "augment=none", "--set", "threads=1"
    )
    assert joint.returncode == 0, joint.stderr
    assert "a joint run is the upper bound itself" in joint.stdout
    ewc = rmconsole("run", "--set", "method=ewc", "--set", "epochs=1", "--set", "augment=none", "--set", "threads=1")
    assert ewc.returncode == 0, ewc.stderr
    listed = {r["method"]: r for r in json.loads(rmconsole("runs", "--json").stdout)}
    a_joint, a_ewc = listed["joint"]["metrics"]["A_last"], listed["ewc"]["metrics"]["A_last"]
    assert abs(listed["ewc"]["metrics"]["I_last"] - (a_joint - a_ewc)) < 1e-9
    assert listed["ewc"]["metrics"]["I_last_joint_run"] == listed["joint"]["id"]
    shown = rmconsole("show", str(listed["ewc"]["id"])).stdout
    assert f"I_last {a_joint - a_ewc:.2f} (vs joint run {listed['joint']['id']})" in shown
    table = rmconsole("runs").stdout
    assert f"{a_joint - a_ewc:.2f}" in table
    finetune = rmconsole("run", "--set", "method=finetune", "--set", "epochs=1", "--set", "threads=1", "--seed", "3")
    assert "I_last — (no matching joint run)" in finetune.stdout


def test_every_view_takes_the_same_joint_run(isolated_home) -> None:
    """The bug of issue 12: the TUI's runs table took the newest joint run (I_last 10.0) while
    `show` and the run page preferred the one with the same augmentation (20.0)."""
    from rmconsole.tui import data

    same_augmentation = _stored("joint", 90.0, augment="cutmix")
    newer_other = _stored("joint", 80.0, augment="none")
    run = _stored("rm", 70.0, augment="cutmix")
    assert same_augmentation < newer_other < run
    views = {
        "show --json": store.run_detail(run)["metrics"]["I_last"],
        "runs --json": next(r for r in json.loads(in_process("runs", "--json").stdout) if r["id"] == run)["metrics"][
            "I_last"
        ],
        "tui runs table": next(r for r in data.load_run_rows() if r.id == run).value("I_last"),
        "tui runs feed": next(r for r in data.RunsFeed().read()[0] if r.id == run).value("I_last"),
        "tui run page": data.load_run_view(run).row.value("I_last"),
        "tui compare": data.load_compare([run]).rows[0].value("I_last"),
    }
    assert views == dict.fromkeys(views, 20.0)
    assert store.run_detail(run)["metrics"]["I_last_joint_run"] == same_augmentation


def test_i_last_against_a_joint_run_with_another_augmentation_is_marked(isolated_home) -> None:
    """RM (CutMix+AutoAugment) measured against the only joint run there is (no augmentation):
    the value is shown, marked, and the note names the joint run and the difference; a joint
    run that differs only in its own recipe (epochs, batch) is no difference."""
    rm = _stored("rm", 80.0, augment="cutmix+autoaug")
    joint = _stored("joint", 96.0, augment="none", epochs=8, batch_size=64)
    record = store.run_record(rm)
    assert record.value("I_last") == 16.0 and record.i_last_joint_run == joint
    assert record.i_last_differs == (("augment", ["cutmix", "autoaug"], []),)
    assert record.i_last_text() == "16.00*"
    assert record.i_last_note == f"against joint run {joint}, which differs in augment cutmix+autoaug here, none there"
    assert store.run_detail(rm)["metrics"]["I_last_joint_differs"] == {
        "augment": {"run": ["cutmix", "autoaug"], "joint": []}
    }
    shown = in_process("show", str(rm)).stdout
    assert "I_last 16.00* (* vs joint run" in shown and "augment cutmix+autoaug here, none there" in " ".join(
        shown.split()
    )
    listed = in_process("runs").stdout
    assert "16.00*" in listed and f"* run {rm}: I_last against joint run {joint}, which differs in augment" in " ".join(
        listed.split()
    )
    clean = _stored("joint", 97.0, augment="cutmix+autoaug", epochs=4)  # same augmentation, another recipe
    record = store.run_record(rm)
    assert record.i_last_joint_run == clean and record.i_last_differs == () and record.i_last_text() == "17.00"
    assert "I_last_joint_differs" not in store.run_detail(rm)["metrics"]
