"""Data-parallel training over torch.distributed ranks (started by torchrun).

Every rank runs the same protocol on the same stream. What keeps them one run:

- the index plans (streams, batches, memory draws) come from generators seeded alike, so
  every rank builds the same plan; each rank trains on its shard of every batch and the
  gradients are averaged over ranks (one coalesced all-reduce per step, weighted by shard
  size, so the step equals the full batch's step);
- model parameters and buffers (batch-norm statistics) are broadcast from rank 0 at the
  start and after every training call, so evaluation and scoring use one model;
- uncertainty scoring, feature extraction and evaluation score contiguous blocks of their
  indices on each rank and all-gather the results in rank order;
- the memory a rank computes is compared (hash, all-gathered) and rank 0's is broadcast, so
  every rank holds the same memory after every update.

Only rank 0 reports to the outside world (the worker's store reporter); the others get a
silent reporter. Single-process runs never touch this module's collectives (`context()` is None).
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterable

import torch
import torch.distributed as dist
from torch import Tensor, nn


class RanksDisagree(RuntimeError):
    """Ranks that must hold the same state do not (a bug, never a user error)."""


@dataclass
class Dist:
    """This process's place in the process group and the device its collectives use."""

    rank: int
    world: int
    device: torch.device  # where tensors go for a collective: cuda:LOCAL_RANK on NCCL, cpu on gloo
    checked_steps: int = 0  # gradient all-reduces whose tripwire was read back (the first few only)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------ sharding

    def shard(self, batch: Tensor) -> tuple[Tensor, float]:
        """This rank's part of a training batch and its gradient weight (its share of the batch).

        A batch too small to give every rank two samples (batch norm needs two) is trained whole
        on every rank; the weights then average the ranks' (differently augmented) gradients.
        """
        if len(batch) < 2 * self.world:
            return batch, 1.0 / self.world
        part = batch.tensor_split(self.world)[self.rank]
        return part, len(part) / len(batch)

    def block(self, idx: Tensor) -> Tensor:
        """This rank's contiguous block of `idx` for scoring (gathered back in rank order)."""
        return idx.tensor_split(self.world)[self.rank]

    # ------------------------------------------------------------------ collectives

    def _on(self, t: Tensor) -> Tensor:
        return t.to(self.device)

    def gather(self, local: Tensor) -> Tensor:
        """Concatenate every rank's `local` (first dims may differ) in rank order, on every rank."""
        n = torch.tensor([len(local)], dtype=torch.long, device=self.device)
        counts = [torch.zeros_like(n) for _ in range(self.world)]
        dist.all_gather(counts, n)
        sizes = [int(c.item()) for c in counts]
        top = max(sizes)
        padded = torch.zeros((top, *local.shape[1:]), dtype=local.dtype, device=self.device)
        padded[:len(local)] = self._on(local)
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(parts, padded)
        return torch.cat([p[:s] for p, s in zip(parts, sizes)]).to(local.device)

    def broadcast(self, t: Tensor) -> Tensor:
        """Rank 0's tensor (any length along dim 0, same dtype and trailing shape) on every rank."""
        n = torch.tensor([len(t)], dtype=torch.long, device=self.device)
        dist.broadcast(n, 0)
        buf = self._on(t) if self.is_main else torch.empty((int(n.item()), *t.shape[1:]), dtype=t.dtype,
                                                            device=self.device)
        dist.broadcast(buf, 0)
        return buf.to(t.device)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's picklable object on every rank (config, resume checkpoint)."""
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self.device if self.device.type == "cuda" else None)
        return box[0]

    def average_gradients(self, params: Iterable[Tensor], weight: float) -> None:
        """Replace each gradient by the weighted sum over ranks (weights sum to 1): one all-reduce.

        The gradient count rides along as a tripwire: ranks whose code paths produced gradients
        for different parameters would otherwise mix unrelated numbers. It is read back on the
        first steps only: reading it forces a device sync, which would stop the CPU from queueing
        the next step ahead of the GPU.
        """
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1).float() for g in grads] +
                         [torch.tensor([float(len(grads))], device=grads[0].device)])
        flat[:-1].mul_(weight)
        flat = self._on(flat)
        dist.all_reduce(flat)
        if self.checked_steps < 3:
            self.checked_steps += 1
            if round(flat[-1].item()) != len(grads) * self.world:
                raise RanksDisagree(f"rank {self.rank}: ranks computed gradients for different parameters")
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset:offset + n].view_as(g))
            offset += n

    def sync_module(self, module: nn.Module) -> None:
        """Rank 0's parameters and buffers (batch-norm running statistics) on every rank."""
        with torch.no_grad():
            tensors = [t for t in (*module.parameters(), *module.buffers()) if t.numel()]
            for dtype in sorted({t.dtype for t in tensors}, key=str):  # the same order on every rank
                group = [t for t in tensors if t.dtype == dtype]
                flat = self._on(torch.cat([t.detach().reshape(-1) for t in group]))
                dist.broadcast(flat, 0)
                offset = 0
                for t in group:
                    t.copy_(flat[offset:offset + t.numel()].view_as(t))
                    offset += t.numel()

    def agree(self, what: str, t: Tensor) -> str:
        """The hash of `t` on this rank, printed; raises RanksDisagree if another rank's differs."""
        digest = tensor_hash(t)
        mine = torch.tensor(list(bytes.fromhex(digest)), dtype=torch.uint8, device=self.device)
        every = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(every, mine)
        hashes = [bytes(e.cpu().tolist()).hex() for e in every]
        sys.stdout.write(f"rank {self.rank}/{self.world}: {what} sha1={digest}\n")  # one write: ranks share a log
        sys.stdout.flush()
        if len(set(hashes)) != 1:
            raise RanksDisagree(f"ranks disagree on {what}: {hashes}")
        return digest

    def same_on_every_rank(self, t: Tensor) -> bool:
        """Whether every rank computed the same `t` (no exception: callers decide what to do)."""
        digest = torch.tensor(list(bytes.fromhex(tensor_hash(t))), dtype=torch.uint8, device=self.device)
        every = [torch.empty_like(digest) for _ in range(self.world)]
        dist.all_gather(every, digest)
        return all(torch.equal(e, every[0]) for e in every)


def tensor_hash(t: Tensor) -> str:
    """sha1 of a tensor's values (dtype and shape included), whatever device it is on."""
    data = t.detach().cpu().contiguous().reshape(-1)
    h = hashlib.sha1(f"{data.dtype}{tuple(t.shape)}".encode())
    h.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return h.hexdigest()


def module_hash(module: nn.Module) -> str:
    """sha1 over a module's parameters and buffers in order."""
    h = hashlib.sha1()
    for t in (*module.parameters(), *module.buffers()):
        h.update(tensor_hash(t).encode())
    return h.hexdigest()


def context() -> Dist | None:
    """The running process group as a Dist, or None when this is a single-process run."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    backend = str(dist.get_backend()).lower()
    if "nccl" in backend and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    return Dist(dist.get_rank(), dist.get_world_size(), device)


def init_from_env(timeout_s: float = 1800.0) -> Dist | None:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR... in the
    environment): NCCL for CUDA tensors when this node has GPUs, gloo for CPU tensors always.

    Returns None when not started by torchrun. The backend cannot wait for the run's config
    (which rank 0 broadcasts over this very group), so a GPU node gets both backends and each
    collective takes the one that matches its tensors' device."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    from datetime import timedelta

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and os.environ.get("RMCONSOLE_DIST_CPU") != "1"
    if use_cuda:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    backend = "cpu:gloo,cuda:nccl" if use_cuda else "gloo"
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    if dist.get_world_size() < 2:
        return None
    return context()


def reseed_augmenter(augmenter: Any, seed: int, rank: int, task: int) -> None:
    """Independent augmentation draws per rank (rank 0 keeps the single-process draws at the
    first task, so a 1-rank run and rank 0 see the same pictures)."""
    if rank == 0:
        return
    derived = (seed * 1_000_003 + rank * 7919 + task) % (2**63)
    augmenter.gen.manual_seed(derived)
    augmenter.rng.seed(derived)


def rank_states(augmenter: Any, d: Dist) -> list[dict[str, Any]]:
    """Every rank's augmenter and torch RNG state, in rank order (for rank 0's checkpoint)."""
    mine = {"augmenter": augmenter.state_dict(), "torch_rng": torch.get_rng_state()}
    every: list[Any] = [None] * d.world
    dist.all_gather_object(every, mine)
    return every


def restore_rank_state(augmenter: Any, resume: dict[str, Any] | None, seed: int, d: Dist) -> None:
    """A rank's own draws: from the checkpoint when it has them for this world size, else
    freshly seeded per rank (a first start, or a checkpoint written by another world size)."""
    states = (resume or {}).get("rank_states")
    if states is not None and len(states) == d.world:
        augmenter.load_state_dict(states[d.rank]["augmenter"])
        torch.set_rng_state(states[d.rank]["torch_rng"])
        return
    reseed_augmenter(augmenter, seed, d.rank, 0 if resume is None else int(resume["task"]) + 1)


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as err:  # noqa: BLE001 - exiting anyway
            print(f"process group teardown failed: {err}", file=sys.stderr, flush=True)
