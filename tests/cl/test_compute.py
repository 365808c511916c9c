"""A run's compute (cl/compute.py) and equal-compute reports (report --budget, issue 40)."""

from __future__ import annotations

import pytest
import torch
from support.online_helpers import Recorder, config, tiny_data
from torch import nn

from rmconsole.cl import compute
from rmconsole.cl.loop import run_protocol
from rmconsole.cl.metrics_anytime import at_budget
from rmconsole.cl.models import build_model
from rmconsole.report import budget as budget_report
from rmconsole.report.tables import build_report, caption, cell_text

LAYERS = ((64, 400), (400, 400), (400, 10))  # mlp400 on 8x8 images: its three linear layers


def test_mlp_flops_equal_the_analytic_count() -> None:
    """2·in·out per linear layer per sample forward; a training step adds the weight gradients
    (2·in·out each) and the input gradients (2·in·out each) of every layer but the first, whose
    input (the images) takes none: 3x forward less the first layer's input gradient."""
    model = build_model("mlp400", (1, 8, 8), 10)
    batch = 16
    forward = sum(2 * i * o for i, o in LAYERS) * batch
    first_input_grad = 2 * LAYERS[0][0] * LAYERS[0][1] * batch
    assert compute.measure(model, "forward", (batch, 1, 8, 8)) == forward
    assert compute.measure(model, "eval", (batch, 1, 8, 8)) == forward
    assert compute.measure(model, "train", (batch, 1, 8, 8)) == 3 * forward - first_input_grad
    # the real model is untouched: no gradient, its batch-norm statistics as they were
    assert all(p.grad is None for p in model.parameters())
    assert int(model.features[2].num_batches_tracked) == 0
    # a frozen head has no weight gradient: one 2·in·out less
    model.fc.weight.requires_grad_(False)
    assert compute.measure(model, "train", (batch, 1, 8, 8)) == 3 * forward - first_input_grad - 2 * 400 * 10 * batch


class PairScores(nn.Module):
    """A pass whose cost is not proportional to the batch (B x B scores, as a contrastive loss):
    a per-sample figure measured once would be wrong at any other batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x.flatten(1))
        return h @ h.T


def test_every_distinct_shape_is_measured_and_counted() -> None:
    model = PairScores()
    ledger = compute.Ledger()
    ledger.add("forward", (2, 1, 8, 8), 3)  # three passes over a memory of 2, then it grows
    ledger.add("forward", (4, 1, 8, 8))
    ledger.add("forward", (2, 1, 8, 8))

    def analytic(b: int) -> int:
        return 2 * b * 64 * 5 + 2 * b * b * 5

    assert ledger.counts == {("forward", (2, 1, 8, 8)): 4, ("forward", (4, 1, 8, 8)): 1}
    assert ledger.flops(model, ["forward"]) == 4 * analytic(2) + analytic(4)
    assert ledger.samples("forward") == 4 * 2 + 4
    restored = compute.Ledger()
    restored.load(ledger.state())  # (checkpointed with the run: a resume continues the count)
    assert restored.counts == ledger.counts


def test_clib_cost_grows_with_its_memory_and_is_measured_per_size() -> None:
    """CLIB scores its whole memory: its forward passes come at every memory size it reaches,
    each counted at its own shape; the run's figures and the anytime points agree with them."""
    data = tiny_data(per_class=8, test_per_class=2)
    rec = Recorder()
    cfg = config(method="clib", memory_size=20, eval_period=40, n_tasks=2, online_iter=0.5)
    outcomes = run_protocol(cfg, data, torch.device("cpu"), rec)
    online = outcomes[-1].extra["online"]
    ledger = compute.Ledger()
    ledger.load(rec.checkpoints[-1]["compute"])  # what the run counted (checkpointed with it)
    sizes = sorted({shape[0] for (kind, shape) in ledger.counts if kind == "forward"})
    assert len(sizes) > 5 and sizes[-1] == 20  # the memory filled up: every size scored, the full one last
    model = build_model("mlp400", (1, 8, 8), 10)
    expected = sum(n * compute.measure(model, k, s) for (k, s), n in ledger.counts.items() if k != "eval")
    assert online["train_tflop"] * 1e12 == pytest.approx(expected)
    flops = [p.train_flops for p in rec.points]
    assert flops == sorted(flops) and 0 < flops[-1] <= expected
    # memory bytes: the memory's samples (64-byte image + 8-byte label) and CLIB's per-slot state
    assert online["memory_bytes"] == 20 * 72 + online["state_bytes"] and online["state_bytes"] >= 2 * 20 * 8


def test_the_curve_is_read_at_the_last_point_within_the_budget() -> None:
    points = [(100, 50.0, 1e9), (200, 60.0, 2e9), (300, 70.0, 3e9)]
    read = at_budget(points, 2e9, spent_flops=3.5e9)  # a point exactly at the budget is within it
    assert (read.accuracy, read.auc, read.samples, read.over) == (60.0, 55.0, 200, True)
    assert at_budget(points, 2.5e9, 3.5e9).accuracy == 60.0
    spare = at_budget(points, 5e9, 3.5e9)  # a run that spent less is read at its end, not marked
    assert (spare.accuracy, spare.over) == (70.0, False)
    assert at_budget(points, 0.5e9, 3.5e9).accuracy is None


def _run(run_id: int, method: str, seed: int, spent: float) -> dict:
    cfg = {"method": method, "seed": seed, "stream": "iblurry", "dataset": "digits"}
    return {"id": run_id, "method": method, "seed": seed, "status": "finished", "config": cfg,
            "metrics": {"train_tflop": spent, "A_last": 90.0}}  # fmt: skip


def test_budget_report_marks_rows_whose_runs_spent_more() -> None:
    runs = [_run(1, "er", 1, 2e-3), _run(2, "er", 2, 2e-3), _run(3, "clib", 1, 8e-3), _run(4, "clib", 2, 8e-3)]
    curves = {
        1: [(100, 40.0, 1e9), (200, 50.0, 2e9)],
        2: [(100, 44.0, 1e9), (200, 54.0, 2e9)],
        3: [(100, 30.0, 2e9), (200, 60.0, 4e9), (300, 80.0, 8e9)],
        4: [(100, 34.0, 2e9), (200, 64.0, 4e9), (300, 84.0, 8e9)],
    }
    read, over = budget_report.read_at_budget(runs, curves, 4e-3)  # 4 GFLOP... in TFLOP: 4e-3
    assert over == {3, 4}
    report = build_report(read, metrics=["A_budget", "A_auc_budget"], budget=4e-3, over_budget=over)
    er, clib = report.rows.index(("er",)), report.rows.index(("clib",))
    assert cell_text(report, report.cell(er, 0), "A_budget") == "52.00 ± 2.83"
    assert cell_text(report, report.cell(clib, 0), "A_budget") == "62.00 ± 2.83▲"
    assert cell_text(report, report.cell(clib, 0), "A_auc_budget") == "47.00 ± 2.83▲"
    text = caption(report)
    assert "budget 0.004 TFLOP of training: 2 runs spent more (▲)" in text and "matmul" not in text
    assert "Prabhu" in text and "over 2 seeds (1, 2)" in text  # the seeds behind every mean ± std


class Kept:
    kept_state = ("fisher", "inner.means", "missing")

    def __init__(self) -> None:
        self.fisher = [torch.zeros(10), torch.zeros(5, dtype=torch.float64)]
        self.inner = type("Inner", (), {"means": torch.zeros(3, 4)})()


def test_state_bytes_sum_what_a_method_declares() -> None:
    assert compute.state_bytes(Kept()) == 10 * 4 + 5 * 8 + 12 * 4
    assert compute.sample_bytes((3, 32, 32)) == 3 * 32 * 32 + 8


def test_a_flop_credit_takes_steps_at_what_the_ledger_charges_them() -> None:
    """train_gflop_per_sample as a credit: a step 4x as costly is taken a quarter as often at the
    same budget, and what is spent stays within the budget times the samples plus one step."""
    model = build_model("mlp400", (1, 8, 8), 10)
    plain = compute.measure(model, "train", (16, 1, 8, 8))
    g = plain / 8 / 1e9  # one plain step per 8 samples
    steps = {}
    for batch in (16, 64):
        credit, ledger = compute.Credit(g), compute.Ledger()
        taken, lowest = 0, 0.0
        for _ in range(800):
            credit.earn()
            taken += credit.run(ledger, model, lambda b=batch, lg=ledger: lg.add("train", (b, 1, 8, 8)))
            if taken >= 2:  # once a step's cost is known, a step is taken only when it is covered
                lowest = min(lowest, credit.balance)
        assert lowest > -1e-6 * plain
        spent = ledger.flops(model, compute.TRAINING)
        assert spent <= g * 1e9 * 800 + compute.measure(model, "train", (batch, 1, 8, 8))
        assert spent >= g * 1e9 * 800 - compute.measure(model, "train", (batch, 1, 8, 8))
        steps[batch] = taken
    assert steps == {16: 100, 64: 25}
    # eval passes are not training; a forward pass made while learning is charged; an iteration
    # that trains nothing ends the iterations (the next sample may bring what it lacked)
    credit, ledger = compute.Credit(g), compute.Ledger()
    credit.earn(100)
    assert credit.spend(ledger, model, lambda: ledger.add("eval", (16, 1, 8, 8))) == 0
    forward = compute.measure(model, "forward", (32, 1, 8, 8))
    assert credit.spend(ledger, model, lambda: ledger.add("forward", (32, 1, 8, 8), 2)) == 2 * forward  # (MIR's two)
    assert credit.run(ledger, model, lambda: None) == 1 and ledger.tab is None
    restored = compute.Credit(g)
    restored.load(credit.state())  # (checkpointed with the run)
    assert (
        (restored.balance, restored.expected)
        == (credit.balance, credit.expected)
        == (100 * g * 1e9 - 2 * forward, 2 * forward)
    )


def test_a_run_with_a_budget_per_sample_spends_it_whatever_its_step_costs() -> None:
    """ER and PCR (two views: twice ER's images per step) at the same GFLOP per sample: PCR takes
    about half ER's steps, and both runs' measured training FLOPs are the budget times the samples
    they received, within one step; without the key the run is online_iter's."""
    data = tiny_data(per_class=12, test_per_class=2)
    model = build_model("mlp400", (1, 8, 8), 10)
    g = compute.measure(model, "train", (8, 1, 8, 8)) / 4 / 1e9  # ER: one step per temp batch of 4
    online = {}
    for method in ("er", "pcr"):
        cfg = config(method=method, eval_period=60, n_tasks=2, train_gflop_per_sample=g)
        online[method] = run_protocol(cfg, data, torch.device("cpu"), Recorder())[-1].extra["online"]
        samples = online[method]["samples_trained"]
        step = compute.measure(model, "train", ((8 if method == "er" else 16), 1, 8, 8))
        spent = online[method]["train_tflop"] * 1e12
        assert (
            g * 1e9 * samples - 2 * step <= spent <= g * 1e9 * samples + step
        )  # (+ the unspent credit of a temp batch)
    er, pcr = online["er"]["optimiser_steps"], online["pcr"]["optimiser_steps"]
    assert er > 20 and abs(pcr - er / 2) <= 2
