"""Several runs per GPU (--runs-per-gpu N): each worker gets 1/N of its device's memory.

On a GPU the CUDA allocator is capped at that fraction, and the batched forward passes shrink
with it: measured on an H100, 8 CIFAR-shaped runs with whole-GPU scoring batches (16384 images,
about 15.8 GiB reserved each) ran 4 of them out of memory. Here, on CPU, with the share as a
fake memory budget: the scoring passes shrink 8-fold, the uncertainties (and so the memory RM
picks) stay bit-identical, and a digits sweep of 2 runs sharing one "GPU" trains as it would alone.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import rmconsole
from support.cli import in_process

from rmconsole.cl import accel
from rmconsole.cl.data import Dataset, TensorImages, load_digits
from rmconsole.cl.inference import uncertainty_of
from rmconsole.cl.loop import build_protocol, make_augmenter, run_protocol
from rmconsole.cl.methods import Setup, method_class
from rmconsole.config import load_config
from rmconsole.runner import queue as Q
from rmconsole.runner.processes import GPU_SHARE_ENV

CPU = torch.device("cpu")
CIFAR = (3, 32, 32)


@pytest.fixture
def share():
    """Set the process's memory share for a test, restored afterwards."""
    before = accel.memory_share()
    yield lambda value: accel.set_memory_share(value, CPU)
    accel.set_memory_share(before)


def test_the_inference_batch_scales_with_the_memory_share(share) -> None:
    assert accel.inference_batch(CIFAR, "cuda") == 16384  # a run alone on its GPU: unchanged
    share(1 / 8)
    assert accel.inference_batch(CIFAR, "cuda") == 2048 and accel.inference_batch(CIFAR, "cpu") == 2048
    assert accel.inference_batch((3, 224, 224), "cuda") == 41  # 330 ImageNet images / 8
    assert accel.inference_batch(CIFAR, "cuda", share=1.0) == 16384  # asked for a whole GPU's chunk
    assert accel.train_chunk(CIFAR, 16) == 8192  # augmentation chunks (and their random draws) stay
    for bad in (0, -0.5, 1.5):
        with pytest.raises(ValueError):
            accel.set_memory_share(bad)


def _synthetic_cifar(n_train: int = 2400, n_test: int = 200) -> Dataset:
    gen = torch.Generator().manual_seed(0)

    def split(n: int) -> TensorImages:
        return TensorImages(torch.randint(0, 256, (n, *CIFAR), dtype=torch.uint8, generator=gen), torch.arange(n) % 10)

    return Dataset(
        "cifar10", split(n_train), split(n_test), [f"c{i}" for i in range(10)], (0.49, 0.48, 0.45), (0.2, 0.2, 0.2)
    )


@pytest.mark.parametrize("measure", ["vr", "autoaug"])
def test_scoring_runs_in_share_sized_passes_with_identical_uncertainties(share, measure) -> None:
    """RM's scoring of 2400 CIFAR-shaped candidates x 12 views (28,800 images): alone, in passes of
    up to 16384 images; with 1/8 of the memory, in passes of at most 2048, and the same u(x)."""
    data = _synthetic_cifar()
    _, cfg = load_config(None, {"model": "mlp400", "augment": "none", "uncertainty": measure, "uncertainty_views": 12})
    proto = build_protocol(cfg, data)
    torch.manual_seed(0)
    method = method_class("rm")(
        Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, CPU, make_augmenter(cfg, data, CPU))
    )
    method.seen[:] = True  # every class exposed (as after the last task)
    with torch.no_grad():  # large random weights: the views disagree, so u(x) tells draws apart
        for p in method.model.parameters():
            p.normal_(0, 1, generator=torch.Generator().manual_seed(p.numel()))
    passes: list[int] = []
    logits = method.logits

    def counted(x):
        passes.append(len(x))
        return logits(x)

    method.logits = counted
    candidates = torch.arange(len(data.train.labels))
    results = {}
    for value in (1.0, 1 / 8):
        share(value)
        passes.clear()
        method.setup.augmenter.gen.manual_seed(7)  # the same draws for both
        results[value] = (uncertainty_of(method, candidates), list(passes))
    (u_alone, votes_alone), alone = results[1.0]
    (u_shared, votes_shared), shared = results[1 / 8]
    assert max(alone) > 2048 and sum(alone) == 2400 * 12
    assert max(shared) <= 2048 and sum(shared) == 2400 * 12 and len(shared) > len(alone)
    assert u_alone.unique().numel() > 3  # the views disagree: a change in the draws would show
    assert torch.equal(u_alone, u_shared) and torch.equal(votes_alone, votes_shared)


def test_slots_share_gpus_round_robin_with_their_share() -> None:
    gpus = ["0", "1"]
    envs = [Q.slot_env(slot, gpus, "auto", runs_per_gpu=2) for slot in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "0", "1"]  # spread, then packed
    assert {e[GPU_SHARE_ENV] for e in envs} == {"0.5"}
    assert Q.default_parallel(gpus, 4) == 8 and Q.default_parallel([], 2) == 2
    assert Q.slot_env(0, [], "cpu", runs_per_gpu=2) == {GPU_SHARE_ENV: "0.5"}  # the CPU path scales too
    assert Q.slot_env(0, gpus, "auto") == {"CUDA_VISIBLE_DEVICES": "0"}  # one run per GPU: no share


def test_runs_per_gpu_is_checked_once_with_an_upper_bound(monkeypatch) -> None:
    """--runs-per-gpu had no upper limit (`--runs-per-gpu 400` started 400 workers on one GPU,
    each told 1/400 of it) and its "at least 1" was written out in three places: the local
    queue, the sweep launcher and the Slurm executor now share one check and one bound."""
    from rmconsole.config import ConfigError
    from rmconsole.runner import executors
    from rmconsole.runner.processes import MAX_RUNS_PER_GPU
    from rmconsole.runner.worker import memory_share_from_env

    assert MAX_RUNS_PER_GPU == 32
    assert executors.check_runs_per_gpu(None) == 1 and executors.check_runs_per_gpu(32) == 32
    for bad in (0, -1, 33, 400, 10**20):
        with pytest.raises(ConfigError, match=r"allowed: 1 to 32 \(runs sharing one GPU"):
            executors.check_runs_per_gpu(bad)
        for entry in (
            lambda bad=bad: executors.parse_executor(None, (), bad),  # the CLI's first look, local or Slurm
            lambda bad=bad: executors.parse_executor("slurm", ["partition=gpu"], bad),
            lambda bad=bad: Q.SweepQueue("s", parallel=1, gpus=[], runs_per_gpu=bad),  # the queue runner's own process
            lambda bad=bad: Q.launch_sweep(None, ["method=rm,er"], runs_per_gpu=bad),  # before anything is planned
        ):
            with pytest.raises(ConfigError, match="allowed: 1 to 32"):
                entry()
    assert executors.parse_executor("slurm", ["partition=gpu"], 32).runs_per_gpu == 32
    monkeypatch.setenv(GPU_SHARE_ENV, repr(1.0 / 32))
    assert memory_share_from_env() == 1 / 32
    for bad in ("0.01", "0", "1.5", "half"):  # a worker given less than 1/32 of its GPU refuses to start
        monkeypatch.setenv(GPU_SHARE_ENV, bad)
        with pytest.raises(ConfigError, match="expected a fraction from 1/32 to 1"):
            memory_share_from_env()


@pytest.mark.usefixtures("store_backend")
def test_two_digits_runs_share_a_slot_pair_and_train_as_alone(isolated_home) -> None:
    """The CPU path with N=2: `--runs-per-gpu 2` gives two slots, both workers run at once with a
    share of 0.5 (their logs say so), and each run's accuracies are those of the run alone."""
    settings = {"epochs": 2, "threads": 1, "device": "cpu"}
    args = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    out = rmconsole("run", "--seeds", "1,2", *args, "--runs-per-gpu", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 slot(s) on CPU, 2 per GPU" in out.stdout
    assert "started in slot 2/2 on CPU (1/2 of its memory)" in out.stdout
    runs = json.loads(in_process("runs", "--json").stdout)
    assert [r["status"] for r in runs] == ["finished", "finished"]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for run in runs:
            log = (isolated_home / "logs" / f"run-{run['id']}.log").read_text()
            assert "memory share 0.5 of cpu: inference forward passes of up to 8192 CIFAR-sized images" in log
            _, cfg = load_config(None, {**settings, "seed": run["seed"]})
            alone = run_protocol(cfg, load_digits(), CPU)
            shown = json.loads(in_process("show", str(run["id"]), "--json").stdout)
            assert [t["accuracy"] for t in shown["tasks"]] == [o.accuracy for o in alone]
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow  # about 20 s alone, 70 s on a loaded 2-core machine: six processes import torch
def test_a_runs_per_gpu_4_sweep_trains_through_the_cuda_standin(isolated_home) -> None:
    """The crash the H100 found, on this CPU: a `--runs-per-gpu 4` sweep on one (stand-in) GPU.
    Its workers resolve `device=auto` to CUDA and cap their allocator at a quarter of it through
    the strict stand-in of torch.cuda (tests/support/cuda_standin.py, installed in every process
    of the sweep by tests/support/cuda_site/sitecustomize.py), then train on the CPU to the end.
    Before the fix each worker died at start: torch refuses the index-less `cuda` device that
    `set_per_process_memory_fraction` was given. (No CUDA graphs: a capture needs a real GPU.)"""
    import os
    from pathlib import Path

    site = Path(__file__).resolve().parents[1] / "support" / "cuda_site"
    env = {
        "RMCONSOLE_TEST_CUDA_STANDIN": "1",
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    env_off = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    settings = {"epochs": 1, "n_tasks": 2, "threads": 1, "cuda_graphs": "false"}
    args = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "rmconsole", "run", "--seeds", "1,2", *args, "--runs-per-gpu", "4"],
        capture_output=True,
        text=True,
        env={**env_off, "COLUMNS": "200", **env},
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 per GPU" in out.stdout
    runs = json.loads(in_process("runs", "--json").stdout)
    assert [r["status"] for r in runs] == ["finished", "finished"]
    for run in runs:
        log = (isolated_home / "logs" / f"run-{run['id']}.log").read_text()
        assert "memory share 0.25 of cuda (CUDA allocator capped)" in log, log
        shown = json.loads(in_process("show", str(run["id"]), "--json").stdout)
        assert shown["device"] == "cuda" and shown["versions"]["gpu"] == "Stand-in CUDA device 0"
        assert len(shown["tasks"]) == 2
