"""The streaming input pipeline for ImageFolder trees too big to hold as one tensor (ImageNet).

The streams and the memory hold sample indices; only the batches being used are decoded.
`StreamingFolder` is an `ImageSource` with two ways in:

- `take(idx)`: one batch now, decoded by a thread pool (torchvision's decoders and resize
  release the GIL) or, on a CUDA device, by nvJPEG in one batched call;
- `batches(plan)`: a whole plan of index batches (an epoch, an evaluation, a scoring pass),
  decoded ahead by DataLoader worker processes into pinned memory and copied without
  blocking, so the model does not wait on decoding.

`iter_batches(source, plan)` and `prefetching(source, plan)` give the rest of the code the
prefetching path whenever a source has one and plain `take` otherwise (in-memory tensors).

The decoded image is the same on every path on the CPU: RGB, the shorter side resized to
`size` (antialiased), centre-cropped to size x size. nvJPEG may differ from libjpeg by a unit
in a few pixels.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

warnings.filterwarnings(
    "ignore", message="The image decoding and encoding capabilities of TorchVision", category=DeprecationWarning
)  # torchvision 0.29 points at TorchCodec; the API works

# decoded bytes (train + test) up to which `data_pipeline=auto` keeps a folder dataset in memory
MEMORY_BUDGET_BYTES = 4 * 2**30


def decode_resized(data: Tensor | str, size: int) -> Tensor:
    """uint8 (3, size, size): RGB, shorter side resized to `size` (antialiased), centre crop."""
    from torchvision.io import ImageReadMode, decode_image, read_file

    raw = read_file(data) if isinstance(data, str) else data
    img = decode_image(raw, mode=ImageReadMode.RGB)
    return _resize_crop(img, size)


def _resize_crop(img: Tensor, size: int) -> Tensor:
    from torchvision.transforms.v2 import functional as F

    if img.shape[-2:] != (size, size):
        img = F.resize(img, [size], antialias=True)
        img = F.center_crop(img, [size, size])
    return img


def local_world() -> int:
    """Processes sharing this machine (torchrun's LOCAL_WORLD_SIZE), to split its cores."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def default_workers() -> int:
    """DataLoader workers per process: the machine's cores split between its ranks, at most 8,
    one core left to the training process itself."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cores // local_world() - 1))


class _Files(torch.utils.data.Dataset):
    """Per-sample work done in a DataLoader worker: the decoded image, or the file's bytes when
    the GPU decodes."""

    def __init__(self, paths: list[str], size: int, raw: bool) -> None:
        self.paths, self.size, self.raw = paths, size, raw

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Tensor:
        from torchvision.io import read_file

        data = read_file(self.paths[i])
        return data if self.raw else decode_resized(data, self.size)


class _Plan(torch.utils.data.Sampler):
    """A batch sampler whose batches are set before each pass: one persistent DataLoader (and
    its worker processes) serves every epoch, evaluation and scoring pass of a run."""

    def __init__(self) -> None:
        self.plan: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.plan)

    def __len__(self) -> int:
        return len(self.plan)


@dataclass
class PackedBytes:
    """A batch of encoded files as ONE tensor (the bytes back to back) and their lengths.

    A DataLoader worker hands each tensor to the main process through its own shared-memory file
    descriptor: a list of 256 per-file tensors per batch, a few batches ahead per worker, ran a
    GPU machine out of descriptors (`OSError: Bad file descriptor` in DupFd, then a hang). Packed,
    a batch costs two."""

    data: Tensor  # uint8, every file's bytes in batch order
    lengths: Tensor  # int64, bytes per file

    def files(self) -> list[Tensor]:
        return list(self.data.split(self.lengths.tolist()))


def pack_bytes(items: list[Tensor]) -> PackedBytes:
    """collate_fn of the byte-sending workers."""
    return PackedBytes(
        torch.cat(items) if items else torch.empty(0, dtype=torch.uint8),
        torch.tensor([len(i) for i in items], dtype=torch.long),
    )


@dataclass
class StreamingFolder:
    """A split kept on disk as image files; batches are decoded when (or just before) needed."""

    paths: list[str]
    labels: Tensor
    size: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    workers: int | None = None  # DataLoader worker processes for `batches` (None: default_workers(); 0: a thread)
    gpu_decode: bool | None = None  # nvJPEG on a CUDA device (None: on whenever the device is CUDA)
    prefetch: int = 4  # batches each worker decodes ahead
    _loader: Any = field(default=None, init=False, repr=False)
    _pool: Any = field(default=None, init=False, repr=False)
    _cache_rows: Any = field(default=None, init=False, repr=False)  # (N,) row in _cache_images, -1: not cached
    _cache_images: Any = field(default=None, init=False, repr=False)  # uint8 (M, 3, size, size) on the device

    def __post_init__(self) -> None:
        self.device = torch.device(self.device)
        if len(self.paths) != len(self.labels):
            raise ValueError("paths and labels differ in length")

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (3, self.size, self.size)

    @property
    def decodes_on_gpu(self) -> bool:
        return self.device.type == "cuda" and self.gpu_decode is not False

    def to(self, device: torch.device | str) -> StreamingFolder:  # (the copy starts without a cache)
        return StreamingFolder(
            self.paths,
            self.labels.to(device),
            self.size,
            torch.device(device),
            self.workers,
            self.gpu_decode,
            self.prefetch,
        )

    # ------------------------------------------------------------------ one batch now

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(1, default_workers()), thread_name_prefix="decode")
        return self._pool

    def take(self, idx: Tensor) -> Tensor:
        """uint8 (len(idx), 3, size, size) on the source's device (cached samples from the cache)."""
        if self._cache_rows is not None:
            return self._merge(idx, lambda missing: self._decode(missing))
        return self._decode(idx)

    def _decode(self, idx: Tensor) -> Tensor:
        rows = idx.tolist()
        if not rows:
            return torch.empty((0, *self.shape), dtype=torch.uint8, device=self.device)
        if self.decodes_on_gpu:
            from torchvision.io import read_file

            return self._gpu_decode(list(self._threads().map(read_file, [self.paths[i] for i in rows])))
        images = list(self._threads().map(lambda i: decode_resized(self.paths[i], self.size), rows))
        return self._to_device(torch.stack(images))

    def _to_device(self, batch: Tensor) -> Tensor:
        if self.device.type == "cuda":
            if not batch.is_pinned():
                batch = batch.pin_memory()
            return batch.to(self.device, non_blocking=True)
        return batch.to(self.device)

    def _gpu_decode(self, raw: list[Tensor]) -> Tensor:
        """nvJPEG in one batched call; a file it cannot decode (PNG, CMYK JPEG) goes to the CPU.
        Any other failure turns GPU decoding off for the run, with one line in the log."""
        from torchvision.io import ImageReadMode, decode_jpeg

        if self.gpu_decode is False:  # turned off after a failure: the workers still send bytes
            return self._to_device(torch.stack([decode_resized(d, self.size) for d in raw]))
        try:
            images = decode_jpeg(raw, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError:
            images = []
            for data in raw:
                try:
                    images.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device))
                except RuntimeError:
                    images.append(decode_resized(data, self.size).to(self.device))
        except Exception as err:  # noqa: BLE001 - the CPU decoder is always a valid fallback
            print(
                f"GPU JPEG decoding failed ({type(err).__name__}: {err}); decoding on the CPU from now on",
                file=sys.stderr,
                flush=True,
            )
            self.gpu_decode = False
            return self._to_device(torch.stack([decode_resized(d, self.size) for d in raw]))
        return torch.stack([_resize_crop(img, self.size) for img in images])

    # ------------------------------------------------------------------ a plan, decoded ahead

    def _dataloader(self, workers: int) -> Any:
        if self._loader is None:
            sampler = _Plan()
            raw = self.decodes_on_gpu
            self._loader = torch.utils.data.DataLoader(
                _Files(self.paths, self.size, raw),
                batch_sampler=sampler,
                num_workers=workers,
                collate_fn=pack_bytes if raw else None,
                pin_memory=self.device.type == "cuda" and not raw,
                persistent_workers=True,
                prefetch_factor=self.prefetch,
            )
        return self._loader

    def batches(self, plan: Iterable[Tensor]) -> Iterator[Tensor]:
        """The images of every index batch in `plan`, in order, decoded ahead of use (samples in
        the cache are not decoded again)."""
        plan = [b.cpu() for b in plan]
        rows = self._cache_rows
        missing = [b if rows is None else b[rows[b] < 0] for b in plan]
        decoded = self._decoded_batches([m for m in missing if len(m)])
        for b, m in zip(plan, missing):
            if len(b) == 0:
                yield torch.empty((0, *self.shape), dtype=torch.uint8, device=self.device)
            elif len(m) == len(b):
                yield next(decoded)
            else:  # some or all of it cached
                yield self._merge(b, lambda _: next(decoded))

    def _decoded_batches(self, plan: list[Tensor]) -> Iterator[Tensor]:
        if not plan:
            return
        workers = default_workers() if self.workers is None else self.workers
        if workers == 0:
            yield from _threaded(self._decode, plan, self.prefetch)
            return
        loader = self._dataloader(workers)
        loader.batch_sampler.plan = [b.tolist() for b in plan]
        for item in loader:
            yield self._gpu_decode(item.files()) if isinstance(item, PackedBytes) else self._to_device(item)

    # ------------------------------------------------------------------ the memory, decoded once

    def _merge(self, idx: Tensor, decode_missing: Callable[[Tensor], Tensor]) -> Tensor:
        """A batch whose cached samples come from the cache and the others from `decode_missing`."""
        idx = idx.cpu()
        rows = self._cache_rows[idx]
        hit = rows >= 0
        if bool(hit.all()):
            return self._cache_images[rows.to(self._cache_images.device)]
        out = torch.empty((len(idx), *self.shape), dtype=torch.uint8, device=self._cache_images.device)
        if bool(hit.any()):
            out[hit.to(out.device)] = self._cache_images[rows[hit].to(out.device)]
        out[(~hit).to(out.device)] = decode_missing(idx[~hit]).to(out.device)
        return out

    def cache(self, idx: Tensor, budget: int | None = None) -> bool:
        """Keep the images of `idx` (the episodic memory) decoded on the device, so the memory
        epochs, the replay half of every stream batch and the memory's share of scoring read
        them instead of decoding them again. Only what was not cached before is decoded. Off
        (and False) when they would not fit `budget` bytes (default MEMORY_BUDGET_BYTES)."""
        budget = MEMORY_BUDGET_BYTES if budget is None else budget
        idx = idx.cpu().long()
        c, h, w = self.shape
        if len(idx) * c * h * w > budget:
            self._cache_rows = self._cache_images = None
            return False
        images = (
            torch.cat(list(self.batches(idx.split(512))))
            if len(idx)
            else torch.empty((0, *self.shape), dtype=torch.uint8, device=self.device)
        )
        rows = torch.full((len(self),), -1, dtype=torch.long)
        rows[idx] = torch.arange(len(idx))
        self._cache_rows, self._cache_images = rows, images
        return True

    def decode_all(self) -> Tensor:
        """Every image, decoded by the DataLoader workers: the in-memory path's one-time load."""
        order = torch.arange(len(self))
        return (
            torch.cat(list(self.batches(order.split(512))))
            if len(self)
            else torch.empty((0, *self.shape), dtype=torch.uint8)
        )

    def close(self) -> None:
        """Stop the worker processes and threads (they also stop when the process exits)."""
        if self._loader is not None:
            iterator = getattr(self._loader, "_iterator", None)
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()
            self._loader = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers pickle the dataset, never this
        state = dict(self.__dict__)
        state["_loader"] = state["_pool"] = state["_cache_rows"] = state["_cache_images"] = None
        return state


def _threaded(take: Callable[[Tensor], Tensor], plan: list[Tensor], depth: int) -> Iterator[Tensor]:
    """`take` of each batch in a background thread, `depth` batches ahead."""
    box: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def produce() -> None:
        try:
            for idx in plan:
                if stop.is_set():
                    return
                box.put((True, take(idx)))
        except BaseException as err:  # noqa: BLE001 - re-raised in the consumer
            box.put((False, err))

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        for _ in plan:
            ok, item = box.get()
            if not ok:
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                box.get_nowait()
            except queue.Empty:
                thread.join(0.05)


def iter_batches(source: Any, plan: Iterable[Tensor]) -> Generator[Tensor, None, None]:
    """uint8 images of each index batch in `plan`: prefetched when the source can, else `take`."""
    if hasattr(source, "batches"):
        yield from source.batches(plan)
    else:
        for idx in plan:
            yield source.take(idx)


class Prefetched:
    """An `images_of(idx)` callable that serves a known plan from the prefetching path.

    Code that asks for images one index batch at a time (uncertainty scoring, feature
    extraction) gets the batch decoded ahead when it asks for the plan's next batch, and a
    plain `take` for anything else, so a wrong guess costs speed, never correctness."""

    def __init__(self, source: Any, plan: list[Tensor]) -> None:
        self.source = source
        self.plan = list(plan)
        self.position = 0
        self.stream = iter_batches(source, self.plan) if hasattr(source, "batches") else None

    def __call__(self, idx: Tensor) -> Tensor:
        if self.stream is not None and self.position < len(self.plan):
            expected = self.plan[self.position]
            if len(expected) == len(idx) and torch.equal(expected.cpu(), idx.cpu()):
                self.position += 1
                return next(self.stream)
            self.stream.close()
            self.stream = None
        return self.source.take(idx)

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None


def prefetching(source: Any, plan: list[Tensor]) -> Callable[[Tensor], Tensor]:
    """`source.take`, or a `Prefetched` plan when the source streams from disk."""
    return Prefetched(source, plan) if hasattr(source, "batches") else source.take


def choose_in_memory(mode: str, n_images: int, shape: tuple[int, int, int], budget: int | None = None) -> bool:
    """`data_pipeline`: memory, stream, or auto = in memory when the decoded uint8 images fit
    `budget` (default MEMORY_BUDGET_BYTES)."""
    budget = MEMORY_BUDGET_BYTES if budget is None else budget
    if mode == "memory":
        return True
    if mode == "stream":
        return False
    if mode != "auto":
        raise ValueError(f"data_pipeline={mode!r}: allowed: auto, memory, stream")
    c, h, w = shape
    return n_images * c * h * w <= budget
