"""DualPrompt's mechanics on the small ViT (random weights saved to a file), numbered as in
cl/methods/dualprompt.py; docs/prompts.md maps each to its test here."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as nnf

from rmconsole.cl.methods.dualprompt import DualPrompt, DualPromptFeatures
from rmconsole.cl.methods.dualprompt_params import DualPromptParams
from rmconsole.cl.models import build_model
from rmconsole.cl.vit import ViT

SMALL = {"dp_g_end": 1, "dp_e_end": 2, "dp_e_pool": 3, "dp_g_length": 2, "dp_e_length": 3}  # the 2-layer ViT


def method(tmp_path: Path) -> DualPrompt:
    """A DualPrompt on the small ViT loaded from a file, without a run around it."""
    torch.manual_seed(0)
    path = tmp_path / "vit_tiny.pt"
    torch.save(build_model("vit_tiny", (3, 32, 32), 5).state_dict(), path)
    m = DualPrompt.__new__(DualPrompt)
    m.params = DualPromptParams(**SMALL)  # type: ignore[arg-type]
    m.n_classes, m.device, m.dist = 5, torch.device("cpu"), None
    m.cfg = SimpleNamespace(model="vit_tiny", model_weights=str(path))  # type: ignore[assignment]
    m.setup = SimpleNamespace(data=SimpleNamespace(image_shape=(3, 32, 32)))  # type: ignore[assignment]
    m.accel = SimpleNamespace(prepare_model=lambda model: model)  # type: ignore[assignment]
    m.seen = torch.ones(5, dtype=torch.bool)
    m.task_index = torch.tensor(2)
    torch.manual_seed(1)
    m.model = m.build_model()
    return m


def features(m: DualPrompt) -> DualPromptFeatures:
    assert isinstance(m.model.features, DualPromptFeatures)
    return m.model.features


def test_eq1_g_prompt_on_the_first_layers_e_prompts_on_the_next_uniform_on_minus_1_1() -> None:
    torch.manual_seed(0)
    f = DualPromptFeatures(ViT(32, 8, 3, 64, 5, 4), DualPromptParams())  # the paper's: G 1-2, E 3-5
    assert (f.g_layers, f.e_layers) == ([0, 1], [2, 3, 4])
    assert f.g.shape == (2, 2, 5, 64) and f.e.shape == (10, 3, 2, 5, 64) and f.keys.shape == (10, 64)
    with torch.no_grad():
        assert -1 <= float(f.e.min()) < -0.9 and 0.9 < float(f.e.max()) <= 1
    prefixes = f.prefixes(torch.tensor([4, 7]))
    assert sorted(prefixes) == [0, 1, 2, 3, 4]
    assert torch.equal(prefixes[1][1][0], f.g[1, 1]) and torch.equal(prefixes[3][0][1], f.e[7, 1, 0])
    with pytest.raises(ValueError, match=r"dp_g_end=2, dp_e_end=5: need 0 <= dp_g_end < dp_e_end <= 2"):
        DualPromptFeatures(ViT(32, 8, 3, 64, 2, 4), DualPromptParams())


def test_eq2_prefix_tuning_prepends_keys_and_values_and_keeps_the_queries() -> None:
    torch.manual_seed(0)
    vit = ViT(32, 8, 3, 64, 2, 4).eval()
    x = torch.randn(2, 3, 32, 32)
    pk, pv = torch.randn(2, 3, 64), torch.randn(2, 3, 64)
    with torch.no_grad():
        out = vit.run(x, prefixes={1: (pk, pv)})
        h = vit.blocks[0](vit.embed(x))  # layer 0: no prefix
        attn, block = vit.blocks[1].attn, vit.blocks[1]
        z = block.norm1(h)
        q, k, v = attn.qkv(z).chunk(3, dim=-1)
        heads = lambda t: t.reshape(2, -1, 4, 16).transpose(1, 2)  # noqa: E731
        k, v = torch.cat([pk, k], dim=1), torch.cat([pv, v], dim=1)
        w = (heads(q) @ heads(k).transpose(-1, -2) / 4.0).softmax(-1)  # sqrt(16)
        h = h + attn.proj((w @ heads(v)).transpose(1, 2).reshape(2, -1, 64))
        h = h + block.mlp(block.norm2(h))
        assert out.shape == (2, 17, 64) and torch.allclose(out, vit.norm(h), atol=1e-5)


def test_eq3_4_training_uses_the_task_e_prompt_inference_the_best_key(tmp_path: Path) -> None:
    m = method(tmp_path)
    f = features(m)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        query = f.vit(x)  # (3) the frozen, unprompted [CLS]
        cos = nnf.cosine_similarity(query[:, None], f.keys[None], dim=-1)  # (B, M)
        best = cos.argmax(1)
        expected = f.vit.run(x, prefixes=f.prefixes(best))[:, 0]
        assert torch.allclose(f(x), expected, atol=1e-6)  # inference: each image its best key
        trained, pulled = f.prompted(x, torch.tensor(2))
        assert torch.allclose(trained, f.vit.run(x, prefixes=f.prefixes(torch.tensor([2, 2, 2])))[:, 0], atol=1e-6)
        assert torch.allclose(pulled, cos[:, 2].mean(), atol=1e-6)
        y = torch.tensor([0, 1, 2])
        loss = nnf.cross_entropy(m.model.fc(trained), y) - 1.0 * cos[:, 2].mean()
        assert torch.allclose(m.step_loss(x, y), loss, atol=1e-5)


def test_eq6_only_prompts_keys_and_head_learn_the_vit_stays_bit_identical(tmp_path: Path) -> None:
    m = method(tmp_path)
    file = torch.load(tmp_path / "vit_tiny.pt", weights_only=True)
    before = {k: v.clone() for k, v in m.model.state_dict().items()}
    optimizer = torch.optim.Adam(m.model.parameters(), lr=0.05, weight_decay=0.1)  # every parameter, as the driver
    for _ in range(2):
        optimizer.zero_grad()
        m.step_loss(torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])).backward()
        optimizer.step()
    after = m.model.state_dict()
    assert all(
        torch.equal(after[f"features.vit.{k.removeprefix('features.')}"], v)
        for k, v in file.items()
        if k.startswith("features.")
    )
    assert all(not torch.equal(before[k], after[k]) for k in ("features.g", "features.e", "features.keys", "fc.weight"))
