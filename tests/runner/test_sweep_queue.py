"""Sweeps: grid expansion and validation, storing a grid, and the queue's scheduling with real
(stand-in) worker subprocesses: slots, GPU assignment, dead workers, stopping, the driver lock."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmconsole import store
from rmconsole.config import ConfigError
from rmconsole.runner import queue as Q
from rmconsole.runner import sweep

pytestmark = pytest.mark.usefixtures("store_backend")  # each test on SQLite and on PostgreSQL


def test_split_values_keeps_lists_and_quotes_whole() -> None:
    assert sweep.split_values("rm,finetune") == ["rm", "finetune"]
    assert sweep.split_values("200, 500") == ["200", "500"]
    assert sweep.split_values('["cutmix","autoaug"],none') == ['["cutmix","autoaug"]', "none"]
    assert sweep.split_values('"a,b",c') == ['"a,b"', "c"]
    assert sweep.split_values("cutmix+autoaug") == ["cutmix+autoaug"]


def test_axes_parse_values_and_refuse_bad_lists() -> None:
    axes = sweep.sweep_axes(["method=rm,finetune", "memory_size=200,500", "augment=none,cutmix+autoaug", "epochs=3"])
    assert axes == {
        "method": ["rm", "finetune"],
        "memory_size": [200, 500],
        "augment": ["none", "cutmix+autoaug"],
        "epochs": [3],
    }
    with pytest.raises(ConfigError, match="unknown config key 'colour'"):
        sweep.sweep_axes(["colour=red,blue"])
    with pytest.raises(ConfigError, match="'200' is given twice"):
        sweep.sweep_axes(["memory_size=200,200"])
    with pytest.raises(ConfigError, match="empty value"):
        sweep.sweep_axes(["method=rm,"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        sweep.sweep_axes(["method"])


def test_is_sweep() -> None:
    assert not sweep.is_sweep(["epochs=3", "augment=cutmix+autoaug", 'augment=["cutmix","autoaug"]'])
    assert sweep.is_sweep(["method=rm,finetune"])
    assert not sweep.is_sweep([], seeds="1")  # one seed is one run: it never takes over `--sweep last`
    assert sweep.is_sweep([], seeds="1,2")
    assert sweep.fold_seed(["epochs=3"], "4") == (["epochs=3", "seed=4"], None)
    assert sweep.fold_seed([], "1,2") == ([], "1,2")


def test_sweep_runs_are_named_apart_by_what_varies() -> None:
    """`--set method=rm,finetune,er --seeds 1,2 --name study` once named all six runs "study"."""
    plan = sweep.plan_sweep(None, ["method=rm,finetune,er", "epochs=1"], "1,2")
    assert sweep.default_name_template(plan) == "{name}·{method}·s{seed}"
    assert sweep.run_names(plan, "study") == [
        "study·rm·s1",
        "study·finetune·s1",
        "study·er·s1",
        "study·rm·s2",
        "study·finetune·s2",
        "study·er·s2",
    ]
    assert sweep.run_names(plan, None) == [None] * 6  # no name asked for: unnamed, as before
    assert sweep.run_names(plan, None, sweep_id="study", named=True)[0] == "study·rm·s1"  # a named sweep names its runs
    assert sweep.run_names(plan, "x", "{n}-{method}-{lr}")[:2] == ["1-rm-0.05", "2-finetune-0.05"]
    lrs = sweep.plan_sweep(None, ["lr=0.1,0.05"])
    assert sweep.run_names(lrs, "x") == ["x·lr=0.1", "x·lr=0.05"]
    assert sweep.run_names(sweep.plan_sweep(None, ["epochs=1"]), "one") == ["one"]
    with pytest.raises(ConfigError, match=r"6 runs would share names \('a·er' 2 times\); add a varying field"):
        sweep.run_names(plan, "a", "{name}·{method}")
    with pytest.raises(ConfigError, match=r"unknown field \{nme\}; allowed: \{name\}, \{method\}"):
        sweep.run_names(plan, "a", "{nme}")


@pytest.mark.parametrize(
    "template, fragment",
    [
        ("{seed:>99999999999}", "does not fit a name (widths up to 200"),  # was a MemoryError (100 GB asked)
        ("{seed:{n}}", "no nested fields"),
        ("{seed.__class__}", "{seed.__class__} is not a field; fields are plain names"),
        ("{seed[0]}", "{seed[0]} is not a field"),
        ("{}", "{} is not a field"),
        ("s\t{seed}", "makes the name 's\\t1'; a run's name is one line of printable text"),
    ],
)
def test_a_name_template_is_refused_before_it_makes_names(template: str, fragment: str) -> None:
    """A template's fields are plain names and its widths fit a name; the names it makes are
    one printable line, as `--name` is (launch.check_identity)."""
    plan = sweep.plan_sweep(None, ["epochs=1"], "1,2")
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        sweep.run_names(plan, "x", template)
    assert sweep.run_names(plan, "x", "{name}-{seed:>3}") == ["x-  1", "x-  2"]  # a width that fits is kept


def test_an_expanding_list_is_announced_with_the_plus_hint() -> None:
    notice = sweep.expansion_notice(sweep.plan_sweep(None, ["augment=cutmix,autoaug"]))
    assert notice == (
        "this expands to 2 runs (augment = 2): augment=cutmix | augment=autoaug — to combine them "
        "in one run, join with '+': --set augment=cutmix+autoaug"
    )
    assert sweep.expansion_notice(sweep.plan_sweep(None, [], "1,2")) is None  # seeds are asked for by name
    many = sweep.expansion_notice(sweep.plan_sweep(None, ["method=rm,er,gdumb"], "1,2,3"))
    assert many is not None and many.startswith("this expands to 9 runs (method × seed = 3 × 3): method=rm, seed=1 |")
    assert many.endswith("… (3 more)") and "join with" not in many


def test_a_sweep_name_is_checked(isolated_home) -> None:
    assert sweep.check_sweep_name("study-1") == "study-1"
    for bad, says in (("last", "means the newest sweep"), ("a b", "allowed: 1-64 letters"), ("-x", "allowed")):
        with pytest.raises(ConfigError, match=says):
            sweep.check_sweep_name(bad)
    plan = sweep.plan_sweep(None, ["method=rm,er", "epochs=1"])
    sweep_id, ids = sweep.store_sweep(plan, "study", name=None)
    assert sweep_id == "study" and [store.get_run(i).name for i in ids] == ["study·rm", "study·er"]
    assert sweep.resolve_sweep_id("study") == "study" == sweep.resolve_sweep_id("last")
    with pytest.raises(ConfigError, match="already in the store"):
        sweep.check_sweep_name("study")


def test_grid_is_the_product_seed_major() -> None:
    points = sweep.expand_grid({"method": ["rm", "er"], "memory_size": [200, 500]}, seeds=[1, 2])
    assert len(points) == 8
    assert points[:4] == [
        {"method": "rm", "memory_size": 200, "seed": 1},
        {"method": "rm", "memory_size": 500, "seed": 1},
        {"method": "er", "memory_size": 200, "seed": 1},
        {"method": "er", "memory_size": 500, "seed": 1},
    ]
    assert {p["seed"] for p in points[4:]} == {2}
    assert sweep.expand_grid({"epochs": [3]}) == [{"epochs": 3}]


def test_plan_validates_every_point() -> None:
    plan = sweep.plan_sweep(None, ["method=rm,finetune,er", "epochs=1"], seeds="1,2,3")
    assert len(plan.configs) == 9 and plan.preset == "digits-blurry10-online"
    assert [(c.method, c.seed) for c in plan.configs[:3]] == [("rm", 1), ("finetune", 1), ("er", 1)]
    assert all(c.epochs == 1 for c in plan.configs)
    assert plan.shape() == "method × seed = 3 × 3"


@pytest.mark.parametrize(
    "pairs, seeds, fragment",
    [
        (["method=rm,nope"], "1,2", "grid point 2/4 (method=nope, seed=1): method='nope': unknown method"),
        (["memory_size=200,5"], None, "grid point 2/2 (memory_size=5): memory_size=5: smaller than the 10 classes"),
        (["n_tasks=5,3"], "1", "grid point 2/2 (n_tasks=3, seed=1): n_tasks=3: digits has 10 classes"),
        (["augment=none,[]"], "1", "grid points 1 and 2 are the same run"),
        (["seed=1,2"], "1,2", "either with --seeds or with --set seed"),
        ([], "1,x", "--seeds '1,x'"),
    ],
)
def test_one_bad_point_refuses_the_sweep_and_stores_nothing(pairs, seeds, fragment) -> None:
    with pytest.raises(ConfigError) as err:
        sweep.plan_sweep(None, pairs, seeds)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert store.list_runs() == []


def test_stored_sweep_shares_an_id_and_is_queued() -> None:
    plan = sweep.plan_sweep(None, ["method=rm,finetune"], seeds="1,2")
    sweep_id, ids = sweep.store_sweep(plan)
    runs = store.list_runs(sweep_id=sweep_id)
    assert [r.id for r in runs] == ids and len(ids) == 4
    assert all(r.status == "queued" and r.preset == "digits-blurry10-online" for r in runs)
    assert [(r.method, r.seed, r.config["seed"]) for r in runs] == [
        ("rm", 1, 1),
        ("finetune", 1, 1),
        ("rm", 2, 2),
        ("finetune", 2, 2),
    ]
    other, _ = sweep.store_sweep(sweep.plan_sweep(None, [], seeds="4"))
    assert sweep.sweep_ids() == [sweep_id, other] and sweep.resolve_sweep_id("last") == other
    with pytest.raises(ConfigError, match="no such sweep"):
        sweep.resolve_sweep_id("nope")


def test_visible_gpus_and_slot_env() -> None:
    assert Q.visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}) == ["3", "5"]
    assert Q.visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"}) == ["0"]
    assert Q.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert Q.default_parallel([]) == 1 and Q.default_parallel(["3", "5"]) == 2
    assert Q.slot_env(0, ["3", "5"], "auto") == {"CUDA_VISIBLE_DEVICES": "3"}
    assert Q.slot_env(1, ["3", "5"], "cuda") == {"CUDA_VISIBLE_DEVICES": "5"}
    assert Q.slot_env(2, ["3", "5"], "auto") == {"CUDA_VISIBLE_DEVICES": "3"}  # more slots than GPUs: shared
    assert Q.slot_env(0, ["3", "5"], "cpu") == {} and Q.slot_env(0, ["3"], "cuda:1") == {}
    assert Q.slot_env(0, [], "auto") == {}


# ---------------------------------------------------------------------- the queue, with stand-in workers

STAND_IN = """
import json, os, sqlite3, sys, time
run_id, out, seconds, outcome = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
url = os.environ.get("RMCONSOLE_DB", "")
if url.startswith("postgresql"):
    import sqlalchemy
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1),
                                      isolation_level="AUTOCOMMIT")
    def execute(sql, *args):
        with engine.connect() as conn:
            conn.exec_driver_sql(sql.replace("?", "%s"), args)
else:
    conn = sqlite3.connect(os.path.join(os.environ["RMCONSOLE_HOME"], "rmconsole.db"), timeout=30,
                           isolation_level=None)
    def execute(sql, *args):
        conn.execute(sql, args)
execute("UPDATE run SET status = 'running' WHERE id = ?", run_id)
started = time.time()
time.sleep(seconds)
with open(os.path.join(out, f"{run_id}.json"), "w") as f:
    json.dump({"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": started, "end": time.time()}, f)
if outcome == "finish":
    execute("UPDATE run SET status = 'finished' WHERE id = ?", run_id)
sys.exit(0 if outcome == "finish" else 3)
"""


def stand_in_starter(out: Path, seconds: float, crash: set[int] = frozenset()):
    """Starts a real process per run, like launch.start_worker but without training (it writes its
    status with plain sqlite3, or SQLAlchemy core on PostgreSQL, so that it starts fast)."""
    script = out / "stand_in.py"
    script.write_text(STAND_IN)

    def start(run_id: int, extra_env: dict | None) -> subprocess.Popen:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(run_id),
                str(out),
                str(seconds),
                "crash" if run_id in crash else "finish",
            ],
            env={**os.environ, **(extra_env or {})},
            start_new_session=True,
        )
        store.update_run(run_id, pid=proc.pid)
        return proc

    return start


def _sweep(n_seeds: int) -> tuple[str, list[int]]:
    return sweep.store_sweep(sweep.plan_sweep(None, [], seeds=",".join(str(s) for s in range(1, n_seeds + 1))))


def test_queue_keeps_n_slots_busy_with_one_gpu_each(tmp_path) -> None:
    sweep_id, ids = _sweep(5)
    busiest = []
    queue = Q.SweepQueue(sweep_id, parallel=2, gpus=["3", "5"], start=stand_in_starter(tmp_path, 0.6))
    counts = queue.run(poll_s=0.05, on_tick=lambda q: busiest.append(len(q.busy)))
    assert counts == {"finished": 5}
    assert max(busiest) == 2
    seen = {i: json.loads((tmp_path / f"{i}.json").read_text()) for i in ids}
    assert [seen[i]["gpu"] for i in ids[:2]] == ["3", "5"]  # the first two run side by side, one GPU each
    assert {s["gpu"] for s in seen.values()} == {"3", "5"}
    spans = sorted((s["start"], s["end"]) for s in seen.values())
    for t in [start for start, _ in spans]:  # never more than two at once
        assert sum(a <= t < b for a, b in spans) <= 2


def test_a_worker_that_dies_silently_is_marked_failed(tmp_path) -> None:
    sweep_id, ids = _sweep(2)
    logged = []
    queue = Q.SweepQueue(
        sweep_id, parallel=1, gpus=[], start=stand_in_starter(tmp_path, 0.1, crash={ids[0]}), log=logged.append
    )
    assert queue.run(poll_s=0.05) == {"finished": 1, "failed": 1}
    assert store.get_run(ids[0]).error.startswith("worker exited with code 3")
    assert any(line.startswith(f"run {ids[0]} failed") for line in logged)


def test_stop_ends_running_workers_and_unstarted_runs(tmp_path) -> None:
    sweep_id, ids = _sweep(3)
    queue = Q.SweepQueue(sweep_id, parallel=2, gpus=[], start=stand_in_starter(tmp_path, 60))
    assert queue.step()
    started = time.monotonic()
    queue.stop(grace_s=5)
    assert time.monotonic() - started < 5  # SIGTERM was enough
    runs = store.list_runs(sweep_id=sweep_id)
    assert [r.status for r in runs] == ["stopped"] * 3
    assert runs[2].error == "sweep stopped before this run started"
    assert not any(Q.launch.pid_alive(r.pid) for r in runs[:2])
    assert Q.requeue(sweep_id) == ids and {r.status for r in store.list_runs(sweep_id=sweep_id)} == {"queued"}


def test_one_driver_per_sweep() -> None:
    sweep_id, _ = _sweep(1)
    assert Q.driver_pid(sweep_id) is None
    with Q.DriverLock(sweep_id):
        assert Q.driver_pid(sweep_id) == os.getpid()
        with pytest.raises(Q.QueueBusy, match=f"already driven by process {os.getpid()}"):
            Q.DriverLock(sweep_id).acquire()
    assert Q.driver_pid(sweep_id) is None
