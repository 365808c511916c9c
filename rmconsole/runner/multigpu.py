"""Multi-GPU runs through torchrun: the command lines, the rendezvous options, the launcher.

`rmconsole run --gpus N` stores the run with `gpus = N`, and `launch.start_worker` has the
run's supervisor (`rmconsole.runner.supervise`, the leader of the run's process session) start

    python -m rmconsole.runner.multigpu RUN_ID -- <torchrun options>

That launcher runs torchrun as its child
(`python -m torch.distributed.run ... -m rmconsole.runner.dist_worker RUN_ID`), which starts N ranks:
NCCL between GPUs, gloo on CPU (`device=cpu`: N CPU processes, for testing). A stop signals
the supervisor's process group (torchrun passes SIGTERM on to the ranks, rank 0 records
`stopped`), and after torchrun exits the launcher makes the store tell the truth:
a run that a failing rank brought down is `failed`, not `stopped` or left `running`.

Several nodes: torchrun's rendezvous options pass through (`--nnodes --node-rank --master-addr
--master-port`, or `--rdzv-endpoint --rdzv-id`); the node that runs `rmconsole run` is node
0 and holds rank 0, the others start their ranks with `rmconsole join RUN_ID ...`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

from ..config import ConfigError, shorten
from .processes import PACKAGE, StopSignal, die_with_supervisor, entry_args, python_m


@dataclass
class Rendezvous:
    """torchrun's options for finding the other nodes; empty = one node (`--standalone`)."""

    nnodes: int = 1
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    extra: list[str] = field(default_factory=list)

    def check(self, joining: bool = False) -> Rendezvous:
        """Refuse combinations torchrun would fail on later, with one line."""
        if self.nnodes < 1:
            raise ConfigError(f"--nnodes {self.nnodes}: must be at least 1")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise ConfigError(f"--master-port {self.master_port}: must be a TCP port (1-65535)")
        if self.node_rank is not None and not 0 <= self.node_rank < self.nnodes:
            raise ConfigError(
                f"--node-rank {self.node_rank}: must be 0 to {self.nnodes - 1} for --nnodes {self.nnodes}"
            )
        if self.master_addr and self.rdzv_endpoint:
            raise ConfigError("give --master-addr (static rendezvous) or --rdzv-endpoint (c10d rendezvous), not both")
        if self.rdzv_endpoint is not None:
            check_endpoint(self.rdzv_endpoint)
        if self.nnodes > 1 or joining:
            if not (self.master_addr or self.rdzv_endpoint):
                raise ConfigError(
                    f"--nnodes {self.nnodes}: the nodes must find each other: give --master-addr HOST "
                    f"(with --node-rank) or --rdzv-endpoint HOST:PORT"
                )
            if self.master_addr and self.node_rank is None:
                raise ConfigError("--master-addr needs --node-rank (0 on the node that runs `rmconsole run`)")
        if self.master_addr and self.node_rank is not None:
            if not joining and self.node_rank != 0:
                raise ConfigError(
                    f"--node-rank {self.node_rank}: `rmconsole run` is node 0 (it holds rank 0, which "
                    f"writes the store); start the other nodes with `rmconsole join RUN_ID`"
                )
            if joining and self.node_rank == 0:
                raise ConfigError(
                    "--node-rank 0 is the node that ran `rmconsole run`; a joining node has rank 1 or more"
                )
        return self

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1 or bool(self.master_addr or self.rdzv_endpoint)

    def args(self) -> list[str]:
        if not self.multi_node:
            return ["--standalone", *self.extra]
        out = ["--nnodes", str(self.nnodes)]
        if self.master_addr:
            out += ["--node-rank", str(self.node_rank), "--master-addr", self.master_addr]
            if self.master_port is not None:
                out += ["--master-port", str(self.master_port)]
        else:
            out += ["--rdzv-backend", "c10d", "--rdzv-endpoint", str(self.rdzv_endpoint)]
            if self.rdzv_id:
                out += ["--rdzv-id", self.rdzv_id]
        return out + self.extra


_HOST = re.compile(r"[\w.:-]+")


def check_endpoint(endpoint: str) -> tuple[str, int | None]:
    """`--rdzv-endpoint HOST[:PORT]` (IPv6 in brackets) as torchrun reads it, refused here in one
    line: torchrun itself answers a bad one with a traceback, after the run is stored (`run`) or
    on the terminal (`join`)."""
    text = endpoint.strip()
    host, port = text, None
    if not (text.startswith("[") and text.endswith("]")) and ":" in text:
        host, _, port_text = text.rpartition(":")
        port = int(port_text) if port_text.isascii() and port_text.isdigit() else -1
    bare = host[1:-1] if len(host) > 1 and host[0] == "[" and host[-1] == "]" else host
    if not _HOST.fullmatch(bare):
        raise ConfigError(
            f"--rdzv-endpoint {shorten(endpoint)!r}: expected HOST:PORT (a host name, an IPv4 address or "
            f"[an IPv6 address]), e.g. node0:29400"
        )
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"--rdzv-endpoint {shorten(endpoint)!r}: the port must be 1 to 65535, e.g. node0:29400")
    return bare, port


def torchrun_argv(run_id: int, nproc: int, rendezvous: Rendezvous | None = None) -> list[str]:
    """torchrun starting `nproc` ranks of `rmconsole.runner.dist_worker RUN_ID` on this node."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        *(rendezvous or Rendezvous()).args(),
        "-m",
        f"{PACKAGE}.dist_worker",
        str(run_id),
    ]


def worker_command(run_id: int, rendezvous: Rendezvous | None = None) -> list[str]:
    """What a run's supervisor starts: `python -m rmconsole.runner.worker RUN_ID`, or for a run
    with gpus > 1 (or several nodes) this module's torchrun launcher."""
    from .. import store

    gpus = int((store.get_run(run_id).config or {}).get("gpus", 1))
    if gpus > 1 or (rendezvous is not None and rendezvous.multi_node):
        return launcher_argv(run_id, gpus, rendezvous)
    return python_m("worker", str(run_id))


def launcher_argv(run_id: int, nproc: int, rendezvous: Rendezvous | None = None) -> list[str]:
    """What `launch.start_worker` runs for a multi-process run: this module's launcher."""
    return python_m("multigpu", str(run_id), "--", *torchrun_argv(run_id, nproc, rendezvous)[3:])


def rank_env(device: str) -> dict[str, str]:
    """Environment for the ranks: CPU runs use gloo only (no NCCL on a GPU machine)."""
    return {"RMCONSOLE_DIST_CPU": "1"} if device == "cpu" else {}


def check_gpus(gpus: int, device: str) -> None:
    """Refuse `gpus > 1` where this node cannot give every rank its own GPU (ConfigError)."""
    if gpus <= 1 or device == "cpu":
        return
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < gpus:
        raise ConfigError(
            f"gpus={gpus}: this machine has {have} visible CUDA device(s); use at most {have}, "
            f"or --set device=cpu to run {gpus} CPU processes on gloo"
        )


# ---------------------------------------------------------------------------- the launcher


def settle(run_id: int, returncode: int, stop_requested: bool) -> str:
    """After torchrun: a run still active, or marked stopped although nobody asked, is failed."""
    from .. import store

    lease = store.Lease.from_env(run_id)
    try:
        settled = store.mark_failed(
            run_id, f"torchrun exited with code {returncode} before the run ended (see the run's log)", lease=lease
        )
        if not settled and settled.status == "stopped" and not stop_requested and returncode != 0:
            settled = store.fail_stopped_run(
                run_id,
                f"a rank failed and torchrun stopped the others (exit code "
                f"{returncode}); the failing rank's traceback is in the run's log",
                lease=lease,
            )
    except store.LeaseLost as err:
        return f"not this launcher's ({err})"
    return settled.status


def main(argv: list[str] | None = None) -> int:
    """`python -m rmconsole.runner.multigpu RUN_ID -- TORCHRUN_ARGS...`: run torchrun, then settle the run."""
    args = entry_args(argv, "python -m rmconsole.runner.multigpu RUN_ID -- TORCHRUN_ARGS", command="required")
    if args is None:
        return 2
    run_id = args.run_id
    from .. import store

    cfg = store.get_run(run_id).config
    die_with_supervisor()
    # a stop signals the whole process group: torchrun forwards it to the ranks; here it is only noted
    stop = StopSignal()
    env = dict(os.environ)
    env.update(rank_env(str(cfg.get("device", "auto"))))
    if cfg.get("threads"):
        env["OMP_NUM_THREADS"] = str(cfg["threads"])
    print(f"launcher: {' '.join(args.command)}", flush=True)
    child = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args.command], env=env)
    returncode = child.wait()  # a stop's SIGTERM only sets the flag here; torchrun ends the ranks
    status = settle(run_id, returncode, stop.requested)
    print(f"launcher: torchrun exited with code {returncode}; run {run_id} is {status}", flush=True)
    return 0 if status == "finished" else (143 if status == "stopped" else 1)


def join_run(run_id: int, nproc: int, rendezvous: Rendezvous, device: str = "auto") -> int:
    """Start this node's ranks of a run started on another node (foreground; no store needed)."""
    env = dict(os.environ)
    env.update(rank_env(device))
    return subprocess.call(torchrun_argv(run_id, nproc, rendezvous), env=env)


if __name__ == "__main__":
    sys.exit(main())
