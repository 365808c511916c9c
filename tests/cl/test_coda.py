"""CODA-Prompt's mechanics on the small ViT (random weights saved to a file), numbered as in
cl/methods/coda.py; docs/prompts.md maps each to its test here."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as nnf

from rmconsole.cl.methods.coda import CODAFeatures, CODAPrompt
from rmconsole.cl.methods.coda_params import CODAParams
from rmconsole.cl.models import build_model
from rmconsole.cl.vit import ViT

SMALL = {"coda_components": 6, "coda_length": 4, "coda_layers": 2}  # 3 tasks of 2 components, both layers


def method(tmp_path: Path, **params: object) -> CODAPrompt:
    torch.manual_seed(0)
    path = tmp_path / "vit_tiny.pt"
    torch.save(build_model("vit_tiny", (3, 32, 32), 5).state_dict(), path)
    m = CODAPrompt.__new__(CODAPrompt)
    m.params = CODAParams(**{**SMALL, **params})  # type: ignore[arg-type]
    m.n_classes, m.device, m.dist = 5, torch.device("cpu"), None
    m.cfg = SimpleNamespace(model="vit_tiny", model_weights=str(path), n_tasks=3)  # type: ignore[assignment]
    m.setup = SimpleNamespace(data=SimpleNamespace(image_shape=(3, 32, 32)))  # type: ignore[assignment]
    m.accel = SimpleNamespace(prepare_model=lambda model: model)  # type: ignore[assignment]
    m.seen = torch.ones(5, dtype=torch.bool)
    m.gen = torch.Generator().manual_seed(3)
    torch.manual_seed(1)
    m.model = m.build_model()
    return m


def features(m: CODAPrompt) -> CODAFeatures:
    assert isinstance(m.model.features, CODAFeatures)
    return m.model.features


def started(m: CODAPrompt, tasks: int) -> CODAFeatures:
    f = features(m)
    for t in range(tasks):
        f.start_task(t, m.gen)
    return f


def test_eq1_2_each_task_gets_a_block_orthogonal_to_the_blocks_before(tmp_path: Path) -> None:
    f = started(method(tmp_path), 2)
    assert f.P.shape == (2, 6, 4, 64) and f.K.shape == (2, 6, 64) and f.per_task == 2
    for param in (f.P, f.K, f.A):
        rows = param.detach()[1, :4].flatten(1)  # tasks 0 and 1, layer 1
        assert torch.allclose(rows @ rows.T, torch.eye(4), atol=1e-5)
        assert not param.detach()[:, 4:].any()  # task 2's block: not initialised yet


def test_eq3_4_6_the_prompt_is_the_cosine_weighted_sum_of_components_as_prefixes(tmp_path: Path) -> None:
    m = method(tmp_path)
    f = started(m, 2)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        q = f.vit(x)  # (3) frozen, unprompted [CLS]
        expected = {}
        for layer in range(2):
            p = torch.zeros(3, 4, 64)
            for c in range(4):  # tasks 0..1: components 0..3; task 2's are not used
                alpha = nnf.cosine_similarity(q * f.A[layer, c], f.K[layer, c][None], dim=-1)
                p += alpha[:, None, None] * f.P[layer, c]
            expected[layer] = (p[:, :2], p[:, 2:])  # first half keys, second half values
        assert torch.allclose(f(x), f.vit.run(x, prefixes=expected)[:, 0], atol=1e-5)


def test_eq5_earlier_blocks_do_not_learn_and_later_ones_are_not_used(tmp_path: Path) -> None:
    m = method(tmp_path)
    f = started(m, 2)  # training task 1
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    m.step_loss(x, y).backward()
    for param in (f.P, f.K, f.A):
        assert param.grad is not None
        assert not param.grad[:, :2].any() and param.grad[:, 2:4].abs().sum() > 0 and not param.grad[:, 4:].any()


def test_eq7_the_ortho_loss_and_the_vit_stays_bit_identical(tmp_path: Path) -> None:
    m = method(tmp_path, coda_ortho=0.5)
    f = started(m, 1)
    with torch.no_grad():
        f.K[0, 0] *= 2.0  # no longer unit length: penalised
        flat = f.K[0, :2]
        k_pen = ((flat @ flat.T - torch.eye(2)) ** 2).mean()
    assert float(k_pen) > 0.5
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    with torch.no_grad():
        ce = nnf.cross_entropy(m.model.fc(f.prompted(x, training=True)), y)
        assert torch.allclose(m.step_loss(x, y), ce + 0.5 * f.ortho_loss(), atol=1e-6)
        assert float(f.ortho_loss()) >= float(k_pen)
    file = torch.load(tmp_path / "vit_tiny.pt", weights_only=True)
    optimizer = torch.optim.Adam(m.model.parameters(), lr=0.05, weight_decay=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        m.step_loss(x, y).backward()
        optimizer.step()
    after = m.model.state_dict()
    assert all(
        torch.equal(after[f"features.vit.{k.removeprefix('features.')}"], v)
        for k, v in file.items()
        if k.startswith("features.")
    )


def test_the_task_survives_a_checkpoint(tmp_path: Path) -> None:
    f = started(method(tmp_path), 3)
    g = CODAFeatures(ViT(32, 8, 3, 64, 2, 4), CODAParams(**SMALL), 3)  # type: ignore[arg-type]
    g.load_state_dict(f.state_dict())
    assert g.current == 2
