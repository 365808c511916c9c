"""What only a CUDA GPU can show: resumed runs continue exactly, bf16 autocast keeps accuracy,
the sweep queue gives each slot its GPU, and synced batch norm runs under torchrun with NCCL.

Marked `gpu` and skipped without CUDA; `benchmarks/gpu_suite.sh` runs them on a GPU machine.
"""

from __future__ import annotations

import io
import json
import math
import os
import statistics
from pathlib import Path

import pytest
import torch
from conftest import needs_mnist, rmconsole

from rmconsole.cl.data import load_digits
from rmconsole.cl.events import Reporter
from rmconsole.cl.loop import run_protocol
from rmconsole.config import load_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CUDA = torch.device("cuda")


class Recorder(Reporter):
    def __init__(self) -> None:
        self.outcomes, self.checkpoints, self.logs = [], [], []

    def task_finished(self, outcome, checkpoint):
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        self.outcomes.append(outcome)
        self.checkpoints.append(buffer.getvalue())

    def log(self, message: str) -> None:
        self.logs.append(message)


def _facts(outcomes):
    return [(o.task, o.accuracy, o.accuracy_row, o.class_accuracy) for o in outcomes]


@pytest.mark.parametrize("model", ["mlp400", "resnet18"])
def test_a_resumed_cuda_run_continues_exactly(model: str) -> None:
    """The checkpoint after task 2, loaded as `resume` loads it, gives the uninterrupted run's
    later tasks bit for bit on the GPU too (bf16 autocast, channels_last, compiled backbone)."""
    _, cfg = load_config(None, {"model": model, "epochs": 2, "uncertainty_views": 4, "device": "cuda"})
    full = Recorder()
    run_protocol(cfg, load_digits(), CUDA, full)
    assert any("compute on cuda" in line for line in full.logs)
    state = torch.load(io.BytesIO(full.checkpoints[1]), weights_only=True)
    assert state.get("cuda_rng") is not None
    resumed = Recorder()
    run_protocol(cfg, load_digits(), CUDA, resumed, resume=state)
    assert _facts(resumed.outcomes) == _facts(full.outcomes[2:])


# Float32 A_last of RM on real MNIST (mnist-blurry10-online, 32 memory epochs): seeds 1-3 on a CPU
# (2026-11-26) and seed 1 on an H100 (2026-11-27, benchmarks/results/h100-2026-11-27/). The two
# seed-1 runs differ by 3.7 points from summation order alone, so one run's spread is that of the
# seed and the device together: all four measurements go into it. The old bar ("float32 > 80 and
# |bf16 - float32| <= 2" on one seed) came from one run and failed one run in three or four.
F32_MEASURED = {"cpu seed 1": 82.48, "cpu seed 2": 81.13, "cpu seed 3": 79.63, "h100 seed 1": 78.79}
RUN_SD = statistics.stdev(F32_MEASURED.values())  # 1.63 points
MEAN_SD = RUN_SD / math.sqrt(3)  # 0.94: the spread of a mean over seeds 1-3
F32_FLOOR = statistics.mean(F32_MEASURED.values()) - 3 * MEAN_SD  # 80.51 - 2.83 = 77.68
BF16_BOUND = 3 * math.sqrt(2) * MEAN_SD  # 4.00: |mean bf16 - mean float32|, both over seeds 1-3


@needs_mnist
def test_bf16_autocast_keeps_mnist_accuracy(isolated_home: Path) -> None:
    """RM on real MNIST (32 memory epochs), seeds 1-3 in float32 and in bf16: the float32 mean above
    its measured floor, the bf16 mean within 3 standard deviations of a difference of two 3-seed
    means of float32 (F32_MEASURED above). The six runs are one sweep packed on the GPU
    (`--runs-per-gpu 6`), so they take about one run's time."""
    from conftest import SHARED_DATA

    out = rmconsole(
        "run", "--preset", "mnist-blurry10-online", "--set", "amp=off,bf16", "--seeds", "1,2,3",
        "--set", "epochs=32", "--set", "device=cuda", "--runs-per-gpu", "6",
        env={"RMCONSOLE_DATA": str(SHARED_DATA)}, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    a_last: dict[str, list[float]] = {"off": [], "bf16": []}
    for run in json.loads(rmconsole("runs", "--json").stdout):
        shown = json.loads(rmconsole("show", str(run["id"]), "--json").stdout)
        amp = shown["config"]["amp"]
        log = (isolated_home / "logs" / f"run-{run['id']}.log").read_text()
        assert f"amp={amp}" in log, log[-2000:]
        a_last[amp].append(shown["tasks"][-1]["accuracy"])
    assert [len(v) for v in a_last.values()] == [3, 3], a_last
    f32, bf16 = statistics.mean(a_last["off"]), statistics.mean(a_last["bf16"])
    print(f"A_last float32 {a_last['off']} mean {f32:.2f}; bf16 {a_last['bf16']} mean {bf16:.2f}")
    assert f32 > F32_FLOOR, (f32, F32_FLOOR)
    assert abs(bf16 - f32) <= BF16_BOUND, (bf16, f32, BF16_BOUND)


def test_sweep_slots_get_their_gpu(isolated_home: Path) -> None:
    """A sweep of two runs with two slots on this machine's GPUs: each run records the GPU its
    slot gave it (CUDA_VISIBLE_DEVICES), both train at the same time on CUDA and finish."""
    out = rmconsole(
        "run", "--seeds", "1,2", "--parallel", "2", "--set", "epochs=40", "--set", "device=cuda", timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(torch.cuda.device_count())))
    expected = sorted(g.strip() for g in gpus.split(",")[:2]) if torch.cuda.device_count() > 1 else ["0", "0"]
    details = [json.loads(rmconsole("show", str(run_id), "--json").stdout) for run_id in (1, 2)]
    for d in details:
        assert d["status"] == "finished", d.get("error")
        assert d["device"].startswith("cuda") and d["versions"]["gpu"] == torch.cuda.get_device_name()
    assert sorted(d["versions"]["cuda_visible_devices"] for d in details) == expected
    (a_start, a_end), (b_start, b_end) = [(d["started_at"], d["finished_at"]) for d in details]
    assert a_start < b_end and b_start < a_end, "the two slots did not train at the same time"


def test_graphed_steps_match_eager_steps() -> None:
    """RM on digits with the training steps replayed as CUDA graphs gives the eager run's
    accuracies (same draws, same arithmetic; only kernel choices may differ)."""
    results = {}
    for graphs in (False, True):
        _, cfg = load_config(None, {"epochs": 4, "uncertainty_views": 4, "device": "cuda", "cuda_graphs": graphs})
        rec = Recorder()
        run_protocol(cfg, load_digits(), CUDA, rec)
        assert any(("cuda_graphs=True" in line) == graphs for line in rec.logs if "compute on" in line)
        results[graphs] = [o.accuracy for o in rec.outcomes]
    print(f"eager {results[False]}, graphed {results[True]}")
    assert max(abs(a - b) for a, b in zip(results[False], results[True])) <= 1.0, results


def test_sync_batch_norm_on_one_nccl_rank_equals_plain_batch_norm(tmp_path: Path) -> None:
    """torch's SyncBatchNorm (what `distributed.sync_batch_norm` puts in a CUDA model) in a real
    one-rank NCCL group: same state-dict keys, and training steps give the plain model's
    outputs, gradients and running statistics."""
    import torch.distributed as dist

    from rmconsole.cl import distributed
    from rmconsole.cl.models import build_model

    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        plain = build_model("resnet18", (3, 32, 32), 10).to(CUDA)
        synced = distributed.sync_batch_norm(
            build_model("resnet18", (3, 32, 32), 10).to(CUDA), distributed.Dist(0, 1, CUDA)
        )
        synced.load_state_dict(plain.state_dict())
        assert any(isinstance(m, torch.nn.SyncBatchNorm) for m in synced.modules())
        assert list(synced.state_dict()) == list(plain.state_dict())
        for _ in range(3):
            x = torch.randn(16, 3, 32, 32, device=CUDA)
            outs = []
            for model in (plain, synced):
                model.train()
                model.zero_grad()
                out = model(x)
                out.square().mean().backward()
                outs.append(out)
            torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-5)
            for (name, a), b in zip(plain.named_parameters(), synced.parameters()):
                torch.testing.assert_close(b.grad, a.grad, rtol=1e-3, atol=1e-5, msg=name)
        for (name, a), b in zip(plain.state_dict().items(), synced.state_dict().values()):
            if a.is_floating_point():
                torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
    finally:
        dist.destroy_process_group()


def test_one_gpu_under_torchrun_finishes(isolated_home: Path) -> None:
    """`--gpus 1` goes through the torchrun launcher on CUDA (the NCCL path's start and end)."""
    out = rmconsole(
        "run", "--gpus", "1", "--set", "model=resnet18", "--set", "epochs=2", "--set", "device=cuda", timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    runs = json.loads(rmconsole("runs", "--json").stdout)
    detail = json.loads(rmconsole("show", str(runs[0]["id"]), "--json").stdout)
    assert detail["status"] == "finished", detail.get("error")
    assert detail["device"].startswith("cuda"), detail["device"]
