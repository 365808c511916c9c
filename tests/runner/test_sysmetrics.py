"""runner/sysmetrics: the supervisor's system-load samples, from injected readings (no
processes), stored and summarised by the store, shown in one line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support import identity_store

from rmconsole import store
from rmconsole.runner import sysmetrics

T0 = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def fake_sampler(trees: list[dict[int, tuple[int, int]]], gpu=lambda pids: (None, None)) -> sysmetrics.Sampler:
    """A sampler reading `trees` one per sample, 2 s apart, at 100 ticks per second."""
    readings = iter(trees)
    clock = iter(range(0, 1000, 2))
    return sysmetrics.Sampler(
        1,
        tree=lambda root: next(readings),
        clock=lambda: float(next(clock)),
        load=lambda: 1.25,
        gpu=gpu,
        now=lambda: T0,
        ticks_per_s=100.0,
    )


def test_cpu_is_the_tree_s_ticks_since_the_last_sample_per_second_of_one_core() -> None:
    seen: list[set[int]] = []
    sampler = fake_sampler(
        [
            {1: (100, 10), 2: (50, 20)},
            {1: (300, 10), 2: (150, 30)},  # 300 ticks in 2 s at 100/s: 150% (one and a half cores)
            {1: (400, 10), 3: (40, 5)},  # 2 gone, 3 new since: its 40 ticks count whole; 140 ticks: 70%
            {},  # the tree is gone
        ],
        gpu=lambda pids: (seen.append(pids), (55.0, 3 * 2**30))[1],
    )
    first, second, third = sampler.sample(), sampler.sample(), sampler.sample()
    assert first is not None and second is not None and third is not None
    assert first["cpu_percent"] is None  # nothing to measure against yet
    assert second["cpu_percent"] == 150.0 and third["cpu_percent"] == 70.0
    assert [s["rss_bytes"] for s in (first, second, third)] == [30, 40, 15]  # summed over the tree
    assert second["load1"] == 1.25 and second["gpu_util"] == 55.0 and second["gpu_mem_bytes"] == 3 * 2**30
    assert seen[-1] == {1, 3}  # the GPU is asked about the tree's processes of the moment
    assert sampler.sample() is None


def test_a_process_whose_ticks_went_backwards_counts_nothing_not_less() -> None:
    sampler = fake_sampler([{1: (500, 1)}, {1: (100, 1)}])  # (a pid reused by a new process)
    sampler.sample()
    assert sampler.sample()["cpu_percent"] == 0.0


def test_the_process_tree_of_this_process_is_read_from_proc() -> None:
    import os

    tree = sysmetrics.process_tree(os.getpid())
    assert os.getpid() in tree and tree[os.getpid()][1] > 0  # this process's own RSS
    assert sysmetrics.process_tree(2**22 + 12345) == {}  # no such process


@pytest.mark.parametrize(("raw", "period"), [("", 5.0), ("2.5", 2.5), ("0", None), ("soon", 5.0), ("-1", 5.0)])
def test_the_period_comes_from_the_environment(raw: str, period: float | None, capsys) -> None:
    assert sysmetrics.period_s({sysmetrics.PERIOD_ENV: raw}) == period
    said = capsys.readouterr().err
    assert ("not a number of seconds" in said) == (raw in ("soon", "-1"))


def test_samples_are_stored_summarised_shown_and_deleted_with_their_run() -> None:
    ids = identity_store.build()
    run_id = ids["base"]
    assert store.system_summary(run_id) is None and "system" not in store.run_detail(run_id)
    recorder = sysmetrics.Recorder(run_id, 0, 1.0, sampler=fake_sampler([]))
    recorder.pending = [
        {"at": T0 + timedelta(seconds=5 * i), "cpu_percent": c, "rss_bytes": r, "load1": load}
        for i, (c, r, load) in enumerate([(None, 2**31, 1.0), (100.0, 3 * 2**31, 2.0), (50.0, 2**31, 3.0)])
    ]
    recorder.flush()  # (what the supervisor's thread does every few samples, and at the end)
    summary = store.run_detail(run_id)["system"]
    assert summary == {
        "samples": 3,
        "first_at": "2026-11-27T12:00:00Z",
        "last_at": "2026-11-27T12:00:10Z",
        "cpu_mean": 75.0,
        "cpu_peak": 100.0,
        "rss_peak_bytes": 3 * 2**31,  # beyond 32 bits: a BIGINT column
        "load1_mean": 2.0,
        "load1_peak": 3.0,
        "gpu_util_mean": None,
        "gpu_util_peak": None,
        "gpu_mem_peak_bytes": None,
    }
    assert sysmetrics.summary_text(summary) == "CPU 75%/100% mean/peak · RSS 6.0G peak · load 2.0/3.0 · 3 samples"
    with_gpu = dict(summary, gpu_util_mean=40.0, gpu_util_peak=90.0, gpu_mem_peak_bytes=5 * 2**29)
    assert sysmetrics.summary_text(with_gpu).endswith("· GPU 40%/90% mem 2.5G peak · 3 samples")
    assert [s["seconds"] for s in store.system_json(run_id)] == [0.0, 5.0, 10.0]
    store.update_run(run_id, status="finished")
    assert store.delete_run(run_id).applied and store.system_samples(run_id) == []


def test_the_supervisor_samples_its_worker_while_it_runs(monkeypatch) -> None:
    """One real supervisor over a 1.5 s child that burns CPU, sampling every 0.2 s."""
    import subprocess
    import sys

    ids = identity_store.build()
    monkeypatch.setenv(sysmetrics.PERIOD_ENV, "0.2")
    burn = "import time\nt = time.time() + 1.5\nwhile time.time() < t: pass"
    command = [sys.executable, "-m", "rmconsole.runner.supervise", str(ids["base"]), "--", sys.executable, "-c", burn]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = store.system_samples(ids["base"])
    assert len(rows) >= 2 and all(r.rss_bytes and r.rss_bytes > 0 for r in rows)
    assert max(r.cpu_percent or 0 for r in rows) > 20  # the busy loop shows (a loaded machine gives it less)


def test_samples_of_a_lease_no_longer_held_are_not_written(monkeypatch) -> None:
    ids = identity_store.build()
    monkeypatch.setenv(store.db.LEASE_ENV, "a-token-of-another-attempt")
    recorder = sysmetrics.Recorder(ids["base"], 0, 1.0, sampler=fake_sampler([]))
    recorder.pending = [{"at": T0, "cpu_percent": 10.0}]
    recorder.flush()
    assert recorder.lost and store.system_samples(ids["base"]) == []
