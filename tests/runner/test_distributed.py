"""Data-parallel runs: the collectives on 2 gloo processes, and `rmconsole run --gpus 2` on CPU
end to end (same memory and model on both ranks after every task, one set of rows)."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as tdist
import torch.multiprocessing as mp
from conftest import rmconsole
from support.cli import in_process

from rmconsole.cl import distributed
from rmconsole.runner.multigpu import Rendezvous, launcher_argv, settle, torchrun_argv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collectives(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    d = distributed.context()
    assert d is not None and d.rank == rank and d.world == world
    results: dict[str, object] = {}

    # sharded batch + weighted gradient average == the full batch's gradient, single process
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    x, y = torch.randn(11, 5), torch.randint(0, 3, (11,))
    for name, batch in (("sharded", torch.arange(11)), ("replicated", torch.arange(3))):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        full = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        part, weight = d.shard(batch)
        torch.nn.functional.cross_entropy(model(x[part]), y[part]).backward()
        d.average_gradients(model.parameters(), weight)
        results[name] = (len(part), all(torch.allclose(p.grad, g, atol=1e-6) for p, g in zip(model.parameters(), full)))

    results["gather"] = d.gather(torch.arange(rank + 2) + 10 * rank).tolist()
    results["gather_2d"] = d.gather(torch.full((rank + 1, 2), float(rank))).tolist()
    results["broadcast"] = d.broadcast(
        torch.tensor([4, 5, 6]) if rank == 0 else torch.empty(0, dtype=torch.long)
    ).tolist()
    results["object"] = d.broadcast_object({"k": 1} if rank == 0 else None)
    results["block"] = d.block(torch.arange(7)).tolist()
    results["shard_ids"] = d.shard(torch.arange(8))[0].tolist()  # RM's [stream half | memory half]

    # synced batch norm: a rank's shard trains as the single-process full batch does
    torch.manual_seed(0)
    reference = torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 3)
    )
    synced = distributed.sync_batch_norm(copy.deepcopy(reference), d)
    xb, yb = torch.randn(8, 4) * 3 + 1, torch.randint(0, 3, (8,))
    torch.nn.functional.cross_entropy(reference(xb), yb).backward()
    part, weight = d.shard(torch.arange(8))
    torch.nn.functional.cross_entropy(synced(xb[part]), yb[part]).backward()
    d.average_gradients(synced.parameters(), weight)
    results["synced_bn"] = (
        isinstance(synced[1], distributed.SyncedBatchNorm),
        all(torch.allclose(a.grad, b.grad, atol=1e-5) for a, b in zip(reference.parameters(), synced.parameters())),
        all(torch.allclose(a, b, atol=1e-5) for a, b in zip(reference.buffers(), synced.buffers())),
    )

    torch.manual_seed(rank)  # different weights and batch-norm statistics on every rank
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    net(torch.randn(8, 4) * (rank + 1))
    d.sync_module(net)
    results["module"] = distributed.module_hash(net)

    results["agree_same"] = d.agree("same", torch.arange(3))
    try:
        d.agree("different", torch.tensor([rank]))
        results["agree_different"] = "no error"
    except distributed.RanksDisagree as err:
        results["agree_different"] = str(err)
    results["same_on_every_rank"] = (d.same_on_every_rank(torch.arange(3)), d.same_on_every_rank(torch.tensor([rank])))
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    tdist.destroy_process_group()


def test_collectives_on_two_gloo_processes(tmp_path: Path) -> None:
    mp.start_processes(_collectives, args=(2, _free_port(), str(tmp_path)), nprocs=2, start_method="fork")
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert r0["sharded"] == (6, True) and r1["sharded"] == (5, True)  # 11 samples: 6 + 5, weights 6/11, 5/11
    assert r0["shard_ids"] == [0, 2, 4, 6] and r1["shard_ids"] == [1, 3, 5, 7]  # both halves on every rank
    assert r0["synced_bn"] == r1["synced_bn"] == (True, True, True)  # gradients and running statistics
    assert r0["replicated"] == (3, True) and r1["replicated"] == (3, True)  # too small to split: whole on both
    assert r0["gather"] == r1["gather"] == [0, 1, 10, 11, 12]
    assert r0["gather_2d"] == r1["gather_2d"] == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
    assert r0["broadcast"] == r1["broadcast"] == [4, 5, 6]
    assert r0["object"] == r1["object"] == {"k": 1}
    assert r0["block"] + r1["block"] == list(range(7))
    assert r0["module"] == r1["module"]
    assert r0["agree_same"] == r1["agree_same"]
    assert "ranks disagree on different" in r0["agree_different"] and "ranks disagree" in r1["agree_different"]
    assert r0["same_on_every_rank"] == r1["same_on_every_rank"] == (True, False)


def test_not_distributed_means_no_context() -> None:
    assert distributed.context() is None
    assert distributed.init_from_env() is None or "RANK" in os.environ


def test_rendezvous_options_and_command_lines() -> None:
    assert Rendezvous().check().args() == ["--standalone"]
    static = Rendezvous(nnodes=2, node_rank=0, master_addr="node0", master_port=29512).check()
    assert static.args() == ["--nnodes", "2", "--node-rank", "0", "--master-addr", "node0", "--master-port", "29512"]
    dynamic = Rendezvous(nnodes=2, rdzv_endpoint="node0:29400", rdzv_id="job7").check()
    assert dynamic.args() == [
        "--nnodes",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "node0:29400",
        "--rdzv-id",
        "job7",
    ]
    Rendezvous(nnodes=2, node_rank=1, master_addr="node0").check(joining=True)
    for endpoint in ("node0", "[::1]:29400", "10.0.0.7:1"):  # torchrun's HOST[:PORT], IPv6 in brackets
        Rendezvous(nnodes=2, rdzv_endpoint=endpoint).check()
    from rmconsole.config import ConfigError

    for bad, joining, fragment in (
        (Rendezvous(nnodes=2), False, "must find each other"),
        (Rendezvous(nnodes=2, node_rank=1, master_addr="a"), False, "`rmconsole run` is node 0"),
        (Rendezvous(nnodes=2, node_rank=0, master_addr="a"), True, "a joining node has rank 1"),
        (Rendezvous(nnodes=2, node_rank=2, master_addr="a"), True, "--node-rank 2"),
        (Rendezvous(nnodes=2, master_addr="a"), False, "needs --node-rank"),
        (Rendezvous(nnodes=2, node_rank=0, master_addr="a", rdzv_endpoint="b:1"), False, "not both"),
        (Rendezvous(master_port=70000), False, "--master-port"),
        (Rendezvous(nnodes=2, rdzv_endpoint="node0:99999"), False, "the port must be 1 to 65535"),
        (Rendezvous(nnodes=2, rdzv_endpoint="node0:"), True, "the port must be 1 to 65535"),
        (Rendezvous(nnodes=2, rdzv_endpoint="node 0:29400"), True, "expected HOST:PORT"),
        (Rendezvous(nnodes=2, rdzv_endpoint=""), False, "expected HOST:PORT"),
    ):
        with pytest.raises(ConfigError, match=re.escape(fragment)):
            bad.check(joining)
    argv = torchrun_argv(7, 4, static)
    assert argv[1:3] == ["-m", "torch.distributed.run"] and argv[-3:] == ["-m", "rmconsole.runner.dist_worker", "7"]
    assert argv[3:5] == ["--nproc-per-node", "4"]
    assert launcher_argv(7, 2)[1:5] == ["-m", "rmconsole.runner.multigpu", "7", "--"]


def test_settle_tells_a_failed_rank_from_a_stop(isolated_home: Path) -> None:
    from rmconsole import store
    from rmconsole.config import load_config

    config = load_config(None)[1].to_dict()
    ids = [store.create_run(config, "digits-blurry10-online", None) for _ in range(3)]
    store.update_run(ids[0], status="running")
    assert settle(ids[0], 1, False) == "failed"  # torchrun gone, rank 0 never wrote an end
    assert "torchrun exited with code 1" in store.get_run(ids[0]).error
    store.update_run(ids[1], status="stopped", error="stopped by request (SIGTERM)")
    assert settle(ids[1], 1, False) == "failed"  # rank 0 was stopped by torchrun because another rank failed
    store.update_run(ids[2], status="stopped", error="stopped by request (SIGTERM)")
    assert settle(ids[2], 1, True) == "stopped"  # a real stop stays a stop


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run", "--gpus", "2", "--seeds", "1,2", "--set", "device=cpu"], "--gpus/--nnodes apply to a single run"),
        (["run", "--set", "gpus=2,3", "--set", "device=cpu"], "a sweep runs one GPU per run"),
        (["run", "--gpus", "2", "--nnodes", "2"], "must find each other"),
        (["run", "--gpus", "0"], "--gpus 0"),
        (["run", "--gpus", "2", "--device", "cuda:1"], "device must be auto, cuda or cpu"),
        (["join", "1", "--gpus", "1", "--nnodes", "2", "--node-rank", "0", "--master-addr", "x"], "joining node"),
    ],
)
def test_bad_multi_gpu_input_is_one_line_and_stores_nothing(args: list[str], fragment: str) -> None:
    out = in_process(*args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert fragment in out.stderr and "Traceback" not in out.stderr and out.stderr.strip().count("\n") == 0
    assert json.loads(in_process("runs", "--json").stdout) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without GPUs")
def test_gpus_without_gpus_is_refused() -> None:
    out = in_process("run", "--gpus", "2")
    assert out.returncode == 2 and "this machine has 0 visible CUDA device(s)" in out.stderr
    assert "--set device=cpu" in out.stderr


def _hashes(log: str, what: str) -> dict[int, dict[int, str]]:
    """{task: {rank: sha1}} from the ranks' `rank R/2: WHAT after task T ... sha1=H` lines."""
    found: dict[int, dict[int, str]] = {}
    for rank, task, digest in re.findall(rf"rank (\d)/2: {what} after task (\d+).*? sha1=([0-9a-f]{{40}})", log):
        found.setdefault(int(task), {})[int(rank)] = digest
    return found


@pytest.mark.full  # 30-40 s of a worker, before every stop; CI's slow leg starts two gloo ranks on the
# digits preset and stops them (test_stop_reaches_every_rank), the ranks' agreement is checked here
def test_two_gloo_processes_run_the_digits_preset(isolated_home: Path) -> None:
    out = rmconsole("run", "--gpus", "2", "--set", "device=cpu", "--set", "threads=1", "--set", "epochs=2")
    log = (isolated_home / "logs" / "run-1.log").read_text()
    assert out.returncode == 0, out.stdout + out.stderr + log
    for what in ("memory", "model"):
        hashes = _hashes(log, what)
        assert sorted(hashes) == [1, 2, 3, 4, 5], log
        assert all(len(set(per_rank.values())) == 1 and set(per_rank) == {0, 1} for per_rank in hashes.values()), hashes
    assert "differed between ranks" not in log
    detail = json.loads(in_process("show", "1", "--json").stdout)
    assert detail["status"] == "finished" and detail["config"]["gpus"] == 2
    assert len(detail["tasks"]) == 5 and len(detail["memory"]) == 5  # one set of rows: rank 0's
    assert all(m["size"] == 200 for m in detail["memory"])
    assert detail["metrics"]["A_last"] > 20
    assert len(json.loads(in_process("runs", "--json").stdout)) == 1
    deadline = time.monotonic() + 30  # `run` returns when rank 0 has written `finished`; the launcher ends after
    while "launcher: torchrun exited" not in log and time.monotonic() < deadline:
        time.sleep(0.2)
        log = (isolated_home / "logs" / "run-1.log").read_text()
    assert "launcher: torchrun exited with code 0; run 1 is finished" in log


def _run_processes(home: Path) -> list[int]:
    """Live processes of a multi-process run for this test's RMCONSOLE_HOME: the launcher,
    torchrun and the ranks."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"rmconsole.runner.dist_worker" in cmdline and f"RMCONSOLE_HOME={home}".encode() in environ:
            pids.append(int(entry.name))
    return pids


@pytest.mark.full  # a two-rank torchrun run stopped, 30 s: before every stop (the ranks' agreement: the `full` test above)
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the ranks")
def test_stop_reaches_every_rank(isolated_home: Path) -> None:
    out = rmconsole(
        "run", "--gpus", "2", "--set", "device=cpu", "--set", "threads=1", "--set", "epochs=500", "--detach"
    )
    assert out.returncode == 0, out.stderr
    from rmconsole import store

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run = store.get_run(1)
        if run.status == "running" and run.phase in ("stream", "memory update", "memory"):
            break
        time.sleep(0.5)
    assert len(_run_processes(isolated_home)) == 5  # supervisor, launcher, torchrun, 2 ranks
    stopped = rmconsole("stop", "1")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    deadline = time.monotonic() + 30
    while _run_processes(isolated_home) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _run_processes(isolated_home) == []
    assert json.loads(rmconsole("runs", "--json").stdout)[0]["status"] == "stopped"


@pytest.mark.slow
@pytest.mark.full  # 45 s of a worker, not in CI: two gloo ranks run in CI's slow leg (stop reaches every rank)
def test_two_nodes_on_localhost_join_without_the_store(isolated_home: Path, tmp_path: Path) -> None:
    """A static two-node rendezvous on one machine: node 0 runs the run, node 1 joins it with
    an unusable store URL (its rank never touches the store) and the run finishes."""
    import subprocess
    import sys

    port = str(_free_port())
    node0 = rmconsole(
        "run",
        "--gpus",
        "1",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        port,
        "--set",
        "device=cpu",
        "--set",
        "threads=1",
        "--set",
        "epochs=1",
        "--detach",
    )
    assert node0.returncode == 0, node0.stderr
    env = dict(
        os.environ, RMCONSOLE_DB=f"sqlite:///{tmp_path}/missing/dir/x.db", RMCONSOLE_HOME=str(tmp_path / "elsewhere")
    )
    joined = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmconsole",
            "join",
            node0.stdout.strip(),
            "--gpus",
            "1",
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            port,
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert joined.returncode == 0, joined.stdout + joined.stderr
    from rmconsole import store

    deadline = time.monotonic() + 60
    while store.get_run(1).status in store.ACTIVE and time.monotonic() < deadline:
        time.sleep(0.5)
    assert store.get_run(1).status == "finished"
    log = (isolated_home / "logs" / "run-1.log").read_text()
    assert sorted(_hashes(log, "memory")) == [1, 2, 3, 4, 5]  # rank 0's lines here; rank 1's went to `join`
    node0_hashes, node1_hashes = _hashes(log, "memory"), _hashes(joined.stdout, "memory")
    assert all(node1_hashes[t][1] == node0_hashes[t][0] for t in range(1, 6))
