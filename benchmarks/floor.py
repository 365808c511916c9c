"""The overhead floor: rmconsole's engine against a bare PyTorch loop, phase by phase.

    python benchmarks/floor.py                         # MNIST RM (mnist-blurry10-online), 1 thread
    python benchmarks/floor.py --data synthetic        # MNIST-shaped random pixels (no download)
    python benchmarks/floor.py --preset cifar10-blurry10-online --data synthetic --device cuda

Each phase runs twice in one process, for the same model, batch size and number of steps:

  floor   a bare PyTorch loop: the images already normalised on the device, no augmentation,
          the run's optimiser (SGD, Nesterov momentum 0.9, weight decay, fused), cross-entropy
          on model(x), zero_grad / backward / step; inference: model(x), arg-max (and votes)
  engine  the code a run uses: `Method.fit` (augmentation, CutMix, the method's loss with its
          unseen-class mask, progress), `Method.uncertainty_of`, `inference.evaluate`

  stream pass            S steps of RM's stream batches (batch_size: half stream, half memory)
  memory epochs          E epochs over K memory samples in memory batches, the run's augmentation
  memory epochs, w/o DA  the same with augment=none (crop + flip only, the paper's "w/o DA")
  uncertainty            N candidates x V perturbed views voted (the floor forwards V clean copies)
  evaluation             the test split

The two alternate `--repeats` times and the best time of each is kept; the ratio engine/floor
is what rmconsole's bookkeeping, augmentation and random draws cost on top of the arithmetic.

`--roofline` (MLP backbones) adds a floor under the bare loop: what the whole run cannot go
below on this core whatever the software, from two measured kernel rates. A training step is at
least its matrix products (each timed alone, in the layouts the step uses, at its batch size)
plus the fused SGD update over every parameter (the kernel alone, a memory-bound pass); a
scored candidate is at least `views` forwards at the inference batch's matrix-product rate.
Batch norm, the loss, augmentation, Python and start-up are left out, so the real run can only
be slower. The figures are set against issue 16's targets (the run <= 60 s, >= 10,000 candidates/s).
CPU seconds (process time: one thread) are printed beside wall seconds, because on a shared
machine the wall clock also counts the neighbours; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as nnf
from common import machine, sync

from rmconsole.cl.accel import inference_batch
from rmconsole.cl.augment import normalize
from rmconsole.cl.data import Dataset, TensorImages, load_run_dataset
from rmconsole.cl.events import Reporter
from rmconsole.cl.inference import evaluate
from rmconsole.cl.loop import build_protocol, make_augmenter
from rmconsole.cl.methods import Setup, Task, method_class
from rmconsole.cl.models import build_model
from rmconsole.config import ConfigError, load_config


def synthetic_like(data: Dataset, seed: int = 0) -> Dataset:
    """Random pixels and labels of `data`'s shape and sizes (speed does not depend on them)."""
    gen = torch.Generator().manual_seed(seed)

    def split(part) -> TensorImages:
        n = len(part)
        images = torch.randint(0, 256, (n, *data.image_shape), dtype=torch.uint8, generator=gen)
        return TensorImages(images, torch.randint(data.n_classes, (n,), generator=gen))

    return Dataset(
        data.name,
        split(data.train),
        split(data.test),
        list(data.class_names),
        data.mean,
        data.std,
        crop_padding=data.crop_padding,
    )


class Floor:
    """The bare loop: the run's model and optimiser, nothing else."""

    def __init__(self, cfg, data: Dataset, device: torch.device) -> None:
        self.device = device
        torch.manual_seed(0)
        self.model = build_model(cfg.model, data.image_shape, data.n_classes).to(device)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(),
            lr=cfg.lr,
            momentum=0.9,
            nesterov=True,
            weight_decay=cfg.weight_decay,
            fused=device.type in ("cuda", "cpu"),
        )
        self.mean = torch.tensor(data.mean, device=device).view(1, -1, 1, 1)
        self.std = torch.tensor(data.std, device=device).view(1, -1, 1, 1)

    def tensors(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return normalize(images.to(self.device), self.mean, self.std), labels.to(self.device)

    def train(self, x: torch.Tensor, y: torch.Tensor, batch: int, epochs: int) -> None:
        """`epochs` shuffled passes over (x, y) in batches (the last batch of one dropped)."""
        self.model.train()
        n = len(x)
        for _ in range(epochs):
            order = torch.randperm(n, device=self.device)
            xs, ys = x[order], y[order]
            for start in range(0, n - 1, batch):
                if n - start < 2:
                    break
                loss = nnf.cross_entropy(self.model(xs[start : start + batch]), ys[start : start + batch])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()

    @torch.inference_mode()
    def votes(self, views: torch.Tensor, n_views: int, chunk: int) -> torch.Tensor:
        """Arg-max votes of `n_views` consecutive copies per candidate, `chunk` views per forward."""
        self.model.eval()
        per = max(1, chunk // n_views)
        n = len(views) // n_views
        best = []
        for start in range(0, n, per):
            part = views.view(n_views, n, *views.shape[1:])[:, start : start + per].flatten(0, 1)
            top = self.model(part).argmax(-1).view(n_views, -1)
            counts = torch.zeros(top.shape[1], self.model.fc.out_features, dtype=torch.long, device=self.device)
            counts.scatter_add_(1, top.t(), torch.ones_like(top.t()))
            best.append(counts.max(1).values.cpu())
        return torch.cat(best)

    @torch.inference_mode()
    def accuracy(self, x: torch.Tensor, y: torch.Tensor, batch: int) -> float:
        self.model.eval()
        right = sum(
            int((self.model(x[s : s + batch]).argmax(-1) == y[s : s + batch]).sum()) for s in range(0, len(x), batch)
        )
        return 100.0 * right / max(1, len(x))


def make_method(preset: str, overrides: list[str], data: Dataset, device: torch.device):
    _, cfg = load_config(preset, overrides)
    torch.manual_seed(cfg.seed)
    protocol = build_protocol(cfg, data)
    on_device = data.to(device)
    setup = Setup(
        cfg,
        on_device,
        protocol.train_labels.to(device),
        protocol.test_labels.to(device),
        protocol.groups,
        device,
        make_augmenter(cfg, on_device, device),
        Reporter(),
    )
    method = method_class(cfg.method)(setup)
    return cfg, protocol, setup, method


def best_of(device: torch.device, work: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(wall, cpu) seconds: the best of `repeats` runs of `work`."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        sync(device)
        w0, c0 = time.perf_counter(), time.process_time()
        work()
        sync(device)
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="mnist-blurry10-online")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override, as `rmconsole run --set` (repeatable)",
    )
    parser.add_argument(
        "--data",
        choices=["real", "synthetic"],
        default="real",
        help="the preset's dataset (RMCONSOLE_DATA), or random pixels of its shape",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: one core)")
    parser.add_argument("--stream-steps", type=int, default=400, help="S")
    parser.add_argument("--epochs", type=int, default=32, help="E")
    parser.add_argument("--candidates", type=int, default=2000, help="N")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--roofline", action="store_true", help="also print the run's arithmetic floor on this core (MLP backbones)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device is available", file=sys.stderr)
        return 2
    try:
        _, cfg = load_config(args.preset, args.overrides)
        data = load_run_dataset(cfg)
    except (ConfigError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.data == "synthetic":
        data = synthetic_like(data)
    overrides = list(args.overrides) + [f"threads={args.threads:d}", f"device={device.type}"]
    cfg, protocol, setup, rm = make_method(args.preset, overrides, data, device)
    _, _, _, noda = make_method(args.preset, overrides + ["augment=none"], data, device)

    # RM at task 2: a full memory (the first K samples of task 1's stream), task 2's stream
    memory = protocol.tasks[0][: cfg.memory_size]
    stream = protocol.tasks[1]
    task = Task(1, stream, len(protocol.tasks))
    for method in (rm, noda):
        method.memory.replace(memory, protocol.train_labels[memory])
        method.before_task(task)
    stream_batches = rm.stream_batches(task)[: args.stream_steps]
    candidates = torch.cat([memory, stream])[: args.candidates]
    classes = sorted(set(protocol.train_labels[torch.cat([memory, stream])].tolist()))
    views = cfg.uncertainty_views if cfg.uncertainty != "none" else 1
    chunk = inference_batch(data.image_shape, device)

    floor = Floor(cfg, data, device)
    train_images, test_images = data.train.take, data.test.take
    xs_stream, ys_stream = floor.tensors(
        train_images(torch.cat(stream_batches)), protocol.train_labels[torch.cat(stream_batches)]
    )
    xs_mem, ys_mem = floor.tensors(train_images(memory), protocol.train_labels[memory])
    xs_cand, _ = floor.tensors(train_images(candidates), protocol.train_labels[candidates])
    xs_views = xs_cand.repeat(views, 1, 1, 1)
    keep = torch.isin(protocol.test_labels, torch.tensor(classes)).nonzero().flatten()
    xs_test, ys_test = floor.tensors(test_images(keep), protocol.test_labels[keep])
    mem_batch = rm.memory_batch_size
    memory_steps = args.epochs * len(rm.shuffled_batches(rm.memory.indices, mem_batch))

    def memory_epochs(method) -> Callable[[], None]:
        return lambda: method.fit(
            args.epochs, lambda e: method.shuffled_batches(method.memory.indices, mem_batch), "memory", task
        )

    phases = [
        (
            "stream pass",
            f"{len(stream_batches)} steps of {cfg.batch_size}",
            len(torch.cat(stream_batches)),
            lambda: floor.train(xs_stream, ys_stream, cfg.batch_size, 1),
            lambda: rm.fit(1, lambda e: stream_batches, "stream", task),
        ),
        (
            "memory epochs",
            f"{memory_steps} steps of {mem_batch}",
            args.epochs * len(memory),
            lambda: floor.train(xs_mem, ys_mem, mem_batch, args.epochs),
            memory_epochs(rm),
        ),
        (
            "memory, w/o DA",
            f"{memory_steps} steps of {mem_batch}",
            args.epochs * len(memory),
            lambda: floor.train(xs_mem, ys_mem, mem_batch, args.epochs),
            memory_epochs(noda),
        ),
        (
            "uncertainty",
            f"{len(candidates)} x {views} views",
            len(candidates),
            lambda: floor.votes(xs_views, views, chunk),
            lambda: rm.uncertainty_of(candidates),
        ),
        (
            "evaluation",
            f"{len(keep)} test images",
            len(keep),
            lambda: floor.accuracy(xs_test, ys_test, inference_batch(data.image_shape, device, 4096)),
            lambda: evaluate(rm, setup.data, setup.test_labels, classes, setup.augmenter),
        ),
    ]
    print(machine())
    print(
        f"preset {args.preset} ({args.data} data), model {cfg.model}, augment {'+'.join(cfg.augment) or 'none'}, "
        f"uncertainty {cfg.uncertainty} x {views}, device {device}"
    )
    # warm-up: lazy initialisation (allocator, kernels, maps) is not what a long run pays per step
    floor.train(xs_mem[:64], ys_mem[:64], mem_batch, 1)
    rm.fit(1, lambda e: rm.shuffled_batches(rm.memory.indices, mem_batch)[:8], "memory", task)
    noda.fit(1, lambda e: noda.shuffled_batches(noda.memory.indices, mem_batch)[:8], "memory", task)
    rm.uncertainty_of(candidates[:64])

    print(
        f"\n{'phase':<16} {'work':<22} {'floor s':>8} {'engine s':>9} {'ratio':>6}   {'wall: floor':>11} "
        f"{'engine':>7} {'ratio':>6}   {'engine /s':>10}"
    )
    rows = []
    for name, work, count, bare, engine in phases:
        fw = fc = ew = ec = float("inf")
        for _ in range(args.repeats):  # alternate, so both see the same neighbours
            w, c = best_of(device, bare, 1)
            fw, fc = min(fw, w), min(fc, c)
            w, c = best_of(device, engine, 1)
            ew, ec = min(ew, w), min(ec, c)
        cpu_ratio, wall_ratio = ec / fc, ew / fw
        rows.append(
            {
                "phase": name,
                "work": work,
                "items": count,
                "floor_cpu_s": fc,
                "engine_cpu_s": ec,
                "ratio_cpu": cpu_ratio,
                "floor_wall_s": fw,
                "engine_wall_s": ew,
                "ratio_wall": wall_ratio,
                "engine_items_per_cpu_s": count / ec,
            }
        )
        print(
            f"{name:<16} {work:<22} {fc:>8.2f} {ec:>9.2f} {cpu_ratio:>5.2f}x   {fw:>11.2f} {ew:>7.2f} "
            f"{wall_ratio:>5.2f}x   {count / ec:>10,.0f}",
            flush=True,
        )
    load = os.getloadavg()
    print(
        f"\nseconds are the best of {args.repeats}; 'floor s'/'engine s' are CPU seconds of this process, "
        f"'wall' the wall clock; load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    roof = None
    if args.roofline:
        roof = roofline(cfg, protocol, data.image_shape, rm.memory_batch_size, views, chunk, device)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "preset": args.preset,
                    "data": args.data,
                    "device": str(device),
                    "load": load,
                    "phases": rows,
                    "roofline": roof,
                },
                indent=1,
            )
        )
    return 0


def _best_seconds(device: torch.device, work: Callable[[], object], calls: int, rounds: int = 7) -> float:
    """Seconds per call of `work`: the best of `rounds` timings of `calls` calls (after a warm-up)."""
    for _ in range(max(1, calls // 10)):
        work()
    best = float("inf")
    for _ in range(rounds):
        sync(device)
        started = time.perf_counter()
        for _ in range(calls):
            work()
        sync(device)
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def _linear_shapes(model: torch.nn.Module) -> list[tuple[int, int]]:
    return [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)]


def step_matmul_seconds(layers: list[tuple[int, int]], batch: int, device: torch.device) -> tuple[float, float]:
    """(seconds, FLOP) of one training step's matrix products for Linear layers (in, out) at
    `batch`: forward addmm(b, h, W.t()), weight gradient mm(g.t(), h), input gradient mm(g, W)
    for every layer but the first, each timed alone as `cl/mlp_step.py` calls it."""
    seconds = flop = 0.0
    for i, (n_in, n_out) in enumerate(layers):
        h, g = torch.randn(batch, n_in, device=device), torch.randn(batch, n_out, device=device)
        w, b = torch.randn(n_out, n_in, device=device), torch.randn(n_out, device=device)
        wt = w.t()
        calls = [lambda: torch.addmm(b, h, wt), lambda: torch.mm(g.t(), h)] + ([lambda: torch.mm(g, w)] if i else [])  # noqa: B023 - timed in this iteration
        seconds += sum(_best_seconds(device, c, 200) for c in calls)
        flop += 2.0 * batch * n_in * n_out * len(calls)
    return seconds, flop


def sgd_update_seconds(model: torch.nn.Module, lr: float, weight_decay: float, device: torch.device) -> float:
    """One fused Nesterov SGD update of every parameter of `model` (the kernel alone)."""
    params = [p.detach().clone().to(device) for p in model.parameters()]
    grads = [torch.randn_like(p) for p in params]
    buffers = [torch.zeros_like(p) for p in params]

    def update() -> None:
        torch._fused_sgd_(
            params,
            grads,
            buffers,
            weight_decay=weight_decay,
            momentum=0.9,
            lr=lr,
            dampening=0.0,
            nesterov=True,
            maximize=False,
            is_first_step=False,
            grad_scale=None,
            found_inf=None,
        )

    return _best_seconds(device, update, 200)


def roofline(cfg, protocol, image_shape, memory_batch: int, views: int, chunk: int, device: torch.device):
    """The run's arithmetic floor on this core (see the module docstring); prints and returns it."""
    model = build_model(cfg.model, image_shape, protocol.train_labels.max().item() + 1)
    layers = _linear_shapes(model)
    if (
        type(model.features) is not torch.nn.Sequential
        or not layers
        or any(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    ):
        print(f"\nroofline: MLP backbones only, not {cfg.model}")
        return None
    mem_s, mem_flop = step_matmul_seconds(layers, memory_batch, device)
    stream_s, stream_flop = step_matmul_seconds(layers, cfg.batch_size, device)
    sgd_s = sgd_update_seconds(model, cfg.lr, cfg.weight_decay, device)
    # inference: every layer's forward at the scoring batch
    fwd_s = fwd_flop = 0.0
    for n_in, n_out in layers:
        h, w, b = (
            torch.randn(chunk, n_in, device=device),
            torch.randn(n_out, n_in, device=device),
            torch.randn(n_out, device=device),
        )
        wt = w.t()
        fwd_s += _best_seconds(device, lambda: torch.addmm(b, h, wt), 5, rounds=5) / chunk  # noqa: B023 - timed here
        fwd_flop += 2.0 * n_in * n_out
    n_params = sum(p.numel() for p in model.parameters())
    tasks = [len(t) for t in protocol.tasks]
    k = cfg.memory_size
    memory_steps = sum(cfg.epochs * math.ceil(min(k, sum(tasks[: i + 1])) / memory_batch) for i in range(len(tasks)))
    stream_steps = sum(math.ceil(n / cfg.batch_size) for n in tasks)
    candidates = sum(min(k, sum(tasks[:i])) + n for i, n in enumerate(tasks))  # memory + the task's stream
    per_candidate = views * fwd_s
    parts = {
        "memory epochs": memory_steps * (mem_s + sgd_s),
        "stream pass": stream_steps * (stream_s + sgd_s),
        "uncertainty": candidates * per_candidate,
    }
    total = sum(parts.values())
    print(f"\nroofline ({cfg.model}: {n_params:,} parameters; this core, one thread):")
    print(
        f"  batch-{memory_batch} step: matrix products {mem_s * 1e3:.3f} ms ({mem_flop / mem_s / 1e9:.1f} GFLOP/s) "
        f"+ fused SGD update {sgd_s * 1e3:.3f} ms ({n_params * 4 * 5 / sgd_s / 1e9:.1f} GB/s over w, g, buf) "
        f"= {(mem_s + sgd_s) * 1e3:.3f} ms"
    )
    print(
        f"  inference forward at batch {chunk}: {fwd_flop / fwd_s / 1e9:.1f} GFLOP/s; {views} views per candidate: "
        f"at most {1 / per_candidate:,.0f} candidates/s (issue 16's target: 10,000)"
    )
    print(
        f"  the run ({cfg.epochs} memory epochs, {len(tasks)} tasks, K = {k}): memory epochs >= "
        f"{parts['memory epochs']:.1f} s ({memory_steps:,} steps), stream pass >= {parts['stream pass']:.1f} s, "
        f"uncertainty >= {parts['uncertainty']:.1f} s ({candidates:,} candidates): >= {total:.1f} s before batch norm, "
        f"loss, augmentation and start-up (issue 16's target: 60 s end to end)"
    )
    return {
        "step_matmul_s": mem_s,
        "step_matmul_gflops": mem_flop / mem_s / 1e9,
        "sgd_update_s": sgd_s,
        "inference_gflops": fwd_flop / fwd_s / 1e9,
        "max_candidates_per_s": 1 / per_candidate,
        "memory_steps": memory_steps,
        "floor_s": parts,
        "floor_total_s": total,
    }


if __name__ == "__main__":
    sys.exit(main())
