"""`torchrun ... -m rmconsole.runner.dist_worker RUN_ID`: one rank of a multi-GPU run.

Rank 0 is the run's worker (`rmconsole.runner.worker`: it reads the run from the store, writes every
row and checkpoint, heartbeats, obeys stop), and before that it broadcasts the run's config
to the other ranks. The other ranks never touch the store: they get the config (and, inside
the loop, the resume checkpoint) from rank 0 over the process group, train their shard of
every batch, and print to the log only. So a node that joins a run needs the dataset, not the
store. Started by `rmconsole.runner.multigpu`, never by hand (except `rmconsole join` on other nodes).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from ..cl import distributed
from ..cl.events import Reporter
from .processes import die_with_parent, entry_args


class RankReporter(Reporter):
    """A non-zero rank's reporter: silent, except log lines, which carry the rank."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def log(self, message: str) -> None:
        print(f"[rank {self.rank}] {message}", flush=True)


def _rank0(run_id: int, dist: distributed.Dist) -> int:
    from .. import store
    from . import worker

    try:
        config: dict[str, Any] | None = store.get_run(run_id).config
    except store.UnknownRun as err:
        print(str(err), file=sys.stderr, flush=True)
        config = None
    dist.broadcast_object(config)
    if config is None:
        return 2
    return worker.main([str(run_id)])


def _follower(run_id: int, dist: distributed.Dist) -> int:
    import torch

    from ..cl.data import load_run_dataset
    from ..cl.loop import run_protocol
    from ..config import build_config
    from .worker import resolve_device

    config = dist.broadcast_object(None)
    if config is None:
        return 2
    try:
        cfg = build_config(config)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        device = resolve_device(cfg.device)
        reporter = RankReporter(dist.rank)
        reporter.log(f"run {run_id}: {cfg.method} on {cfg.dataset}, device {device}")
        data = load_run_dataset(cfg)
        run_protocol(cfg, data, device, reporter, resume=None)  # rank 0 broadcasts the resume state
        reporter.log(f"run {run_id}: done")
        return 0
    except Exception:  # noqa: BLE001 - torchrun sees the exit code and stops the other ranks
        traceback.print_exc()
        print(f"[rank {dist.rank}] failed; torchrun stops the other ranks", file=sys.stderr, flush=True)
        return 1


def main(argv: list[str] | None = None) -> int:
    args = entry_args(argv, "torchrun [options] -m rmconsole.runner.dist_worker RUN_ID")
    if args is None:
        return 2
    run_id = args.run_id
    die_with_parent()  # torchrun starts each rank in its own session: die with torchrun, not after it
    dist = distributed.init_from_env()
    if dist is None:  # one process: the plain worker
        from . import worker

        return worker.main([str(run_id)])
    code = 1
    try:
        code = _rank0(run_id, dist) if dist.is_main else _follower(run_id, dist)
        return code
    finally:
        distributed.shutdown(finished=code == 0)


if __name__ == "__main__":
    # Leave without interpreter finalization: gloo's threads can still hold tensors then, and
    # freeing them while Python tears down aborts the rank (SIGABRT, "terminate called without
    # an active exception", after a finished run, twice in CI), so torchrun reports a finished
    # run as failed. Everything is written and the group destroyed by now; flush and go.
    exit_code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
