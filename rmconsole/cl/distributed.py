"""Data-parallel training over torch.distributed ranks (started by torchrun).

Every rank runs the same protocol on the same stream. What keeps them one run:

- the index plans (streams, batches, memory draws) come from generators seeded alike, so
  every rank builds the same plan; each rank trains on its shard of every batch and the
  gradients are averaged over ranks (one coalesced all-reduce per step, weighted by shard
  size, so the step equals the full batch's step);
- batch norm is synchronised: in training its statistics are those of the whole batch (all
  ranks' shards; `sync_batch_norm`), so a rank's shard of a small batch (the paper's 16) is
  normalised as the single-process run normalises the batch;
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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

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

        Shards interleave (rank r takes samples r, r + world, ...): batches are built in
        parts (RM's stream half, then its memory half), and a contiguous split would give one
        rank only stream samples and another only memory samples, so each rank's batch-norm
        statistics would describe a different population. A batch too small to give every
        rank two samples (batch norm needs two) is trained whole on every rank; the weights
        then average the ranks' (differently augmented) gradients.
        """
        if len(batch) < 2 * self.world:
            return batch, 1.0 / self.world
        part = batch[self.rank :: self.world]
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
        padded[: len(local)] = self._on(local)
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(parts, padded)
        return torch.cat([p[:s] for p, s in zip(parts, sizes)]).to(local.device)

    def broadcast(self, t: Tensor) -> Tensor:
        """Rank 0's tensor (any length along dim 0, same dtype and trailing shape) on every rank."""
        n = torch.tensor([len(t)], dtype=torch.long, device=self.device)
        dist.broadcast(n, 0)
        buf = (
            self._on(t)
            if self.is_main
            else torch.empty((int(n.item()), *t.shape[1:]), dtype=t.dtype, device=self.device)
        )
        dist.broadcast(buf, 0)
        return buf.to(t.device)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's picklable object on every rank (config, resume checkpoint)."""
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self.device if self.device.type == "cuda" else None)
        return box[0]

    def all_sum(self, t: Tensor) -> Tensor:
        """The sum of `t` over every rank (a new tensor on `t`'s device)."""
        summed = self._on(t.clone())
        dist.all_reduce(summed)
        return summed.to(t.device)

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
        flat = torch.cat(
            [g.reshape(-1).float() for g in grads] + [torch.tensor([float(len(grads))], device=grads[0].device)]
        )
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
            g.copy_(flat[offset : offset + n].view_as(g))
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
                    t.copy_(flat[offset : offset + t.numel()].view_as(t))
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


def shutdown(finished: bool = False) -> None:
    """Tear the process group down. `finished`: every rank got through its run, so they first
    meet at a barrier. Without it, a rank that destroys its gloo group while another still has
    work in flight can abort at exit ("terminate called without an active exception", SIGABRT,
    seen once in CI after a finished run): torchrun then reports a failure for a run that
    finished. After a failure there is no barrier, since a dead rank would never come."""
    if dist.is_available() and dist.is_initialized():
        if finished:
            try:
                dist.barrier()
            except Exception as err:  # noqa: BLE001 - exiting anyway
                print(f"barrier before teardown failed: {err}", file=sys.stderr, flush=True)
        try:
            dist.destroy_process_group()
        except Exception as err:  # noqa: BLE001 - exiting anyway
            print(f"process group teardown failed: {err}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- synchronised batch norm


class _SyncedNorm(torch.autograd.Function):
    """y = w * (x - mean) * invstd + b with mean/invstd over every rank's samples; its backward
    all-reduces the two sums the input gradient needs (as torch's SyncBatchNorm does on GPUs)."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, weight: Tensor, bias: Tensor, mean: Tensor, invstd: Tensor, count: float, d: Dist
    ) -> Tensor:
        shape = [1, -1] + [1] * (x.dim() - 2)
        xhat = (x - mean.view(shape)) * invstd.view(shape)
        ctx.save_for_backward(xhat, weight, invstd)
        ctx.count, ctx.d, ctx.shape = count, d, shape
        return xhat * weight.view(shape) + bias.view(shape)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        xhat, weight, invstd = ctx.saved_tensors
        dims = [0, *range(2, grad.dim())]
        local = torch.cat([grad.sum(dims), (grad * xhat).sum(dims)])
        total = ctx.d.all_sum(local) / ctx.count
        c, shape = weight.numel(), ctx.shape
        dx = (weight * invstd).view(shape) * (grad - total[:c].view(shape) - xhat * total[c:].view(shape))
        return dx, local[c:], local[:c], None, None, None, None


class SyncedBatchNorm(nn.modules.batchnorm._BatchNorm):
    """Batch norm whose training statistics are the whole batch's, over every rank (gloo or
    NCCL); in evaluation it is plain batch norm on the (rank-0-broadcast) running statistics."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    dist: Dist | None = None  # set by sync_batch_norm

    def forward(self, x: Tensor) -> Tensor:
        d = self.dist
        # (meta tensors: cl/compute.py measuring a pass's FLOPs, which must not meet the other ranks)
        if not self.training or d is None or not self.affine or not self.track_running_stats or x.is_meta:
            return super().forward(x)
        dims = [0, *range(2, x.dim())]
        # track_running_stats (checked above): the three buffers exist
        assert self.num_batches_tracked is not None and self.running_mean is not None and self.running_var is not None
        with torch.no_grad():
            local_count = torch.tensor([x.numel() / x.shape[1]], dtype=torch.float64, device=x.device)
            first = d.all_sum(torch.cat([x.sum(dims).double(), local_count]))
            count = float(first[-1])
            mean = first[:-1] / count
            centred = x.double() - mean.view([1, -1] + [1] * (x.dim() - 2))
            var = d.all_sum((centred * centred).sum(dims)) / count
            momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked + 1)
            self.num_batches_tracked.add_(1)
            self.running_mean.mul_(1 - momentum).add_(mean.to(self.running_mean.dtype), alpha=momentum)
            unbiased = var * (count / max(count - 1.0, 1.0))
            self.running_var.mul_(1 - momentum).add_(unbiased.to(self.running_var.dtype), alpha=momentum)
            invstd = torch.rsqrt(var + self.eps).to(x.dtype)
        return _SyncedNorm.apply(x, self.weight, self.bias, mean.to(x.dtype), invstd, count, d)


M = TypeVar("M", bound=nn.Module)


def sync_batch_norm(model: M, d: Dist) -> M:
    """`model` with every batch-norm layer synchronised over the ranks (same parameters and
    buffers, so state dicts are unchanged): torch's SyncBatchNorm on CUDA, SyncedBatchNorm else."""
    if any(p.is_cuda for p in model.parameters()):
        return cast(M, nn.SyncBatchNorm.convert_sync_batchnorm(model))  # `model` itself, unless it is a batch norm
    for name, child in list(model.named_children()):
        if isinstance(child, nn.modules.batchnorm._BatchNorm) and not isinstance(child, SyncedBatchNorm):
            synced = SyncedBatchNorm(
                child.num_features, child.eps, child.momentum, child.affine, child.track_running_stats
            )
            synced.weight, synced.bias = child.weight, child.bias
            for buffer in ("running_mean", "running_var", "num_batches_tracked"):
                setattr(synced, buffer, getattr(child, buffer))
            synced.train(child.training)
            synced.dist = d
            setattr(model, name, synced)
        else:
            sync_batch_norm(child, d)
    return model
