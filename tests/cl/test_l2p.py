"""L2P's mechanics on the small ViT (random weights saved to a file), equation by equation as
cl/methods/l2p.py numbers them; docs/prompts.md maps each equation to its test here."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as nnf

from rmconsole.cl.methods.l2p import L2P, L2PFeatures, PromptPool
from rmconsole.cl.methods.l2p_params import L2PParams
from rmconsole.cl.models import build_model
from rmconsole.cl.vit import ViT


def weights_file(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    path = tmp_path / "vit_tiny.pt"
    torch.save(build_model("vit_tiny", (3, 32, 32), 5).state_dict(), path)
    return path


def method(tmp_path: Path, **params: object) -> L2P:
    """An L2P on the small ViT loaded from a file, without a run around it."""
    m = L2P.__new__(L2P)
    m.params = L2PParams(**params)  # type: ignore[arg-type]
    m.n_classes, m.device, m.dist = 5, torch.device("cpu"), None
    m.cfg = SimpleNamespace(  # type: ignore[assignment]
        model="vit_tiny",
        model_weights=str(weights_file(tmp_path)),
        optimizer="adam",
        lr=0.05,
        weight_decay=0.1,  # decay would move any parameter the optimiser held with a gradient
        train_head=True,
        stream="siblurry",
        batch_size=4,
    )
    m.setup = SimpleNamespace(data=SimpleNamespace(image_shape=(3, 32, 32)))  # type: ignore[assignment]
    m.accel = SimpleNamespace(prepare_model=lambda model: model)  # type: ignore[assignment]
    m.seen = torch.ones(5, dtype=torch.bool)
    torch.manual_seed(1)
    m.model = m.build_model()
    return m


def test_eq1_the_pool_holds_m_prompts_and_keys_uniform_on_0_1() -> None:
    torch.manual_seed(0)
    pool = PromptPool(10, 5, 64).requires_grad_(False)
    assert pool.prompts.shape == (10, 5, 64) and pool.keys.shape == (10, 64)
    assert float(pool.prompts.min()) >= 0 and float(pool.prompts.max()) < 1 and float(pool.keys.min()) >= 0


def test_eq2_the_query_is_the_frozen_unprompted_cls_feature(tmp_path: Path) -> None:
    m = method(tmp_path)
    features = m.model.features
    assert isinstance(features, L2PFeatures)
    seen: list[torch.Tensor] = []
    match = features.pool.match
    features.pool.match = lambda q, k, b: (seen.append(q), match(q, k, b))[1]  # type: ignore[method-assign]
    x = torch.randn(3, 3, 32, 32)
    features(x)
    assert torch.equal(seen[0], features.vit(x)) and not seen[0].requires_grad


def test_eq3_the_top_n_keys_by_cosine_choose_and_batchwise_takes_the_most_chosen() -> None:
    pool = PromptPool(4, 1, 2)
    with torch.no_grad():
        pool.keys.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 4.0], [-1.0, 0.1]]))
    query = torch.tensor([[1.0, 0.1], [0.1, 1.0], [1.0, 1.0]])
    chosen, _ = pool.match(query, 2, batchwise=False)
    assert chosen.tolist() == [[0, 2], [1, 2], [2, 1]]  # by angle, not by length ([5, 4] is long)
    batch, _ = pool.match(query, 2, batchwise=True)
    assert batch.tolist() == [[2, 1]] * 3  # chosen: id 2 three times, id 1 twice, id 0 once
    tie, _ = pool.match(query[:2], 2, batchwise=True)
    assert tie.tolist() == [[2, 0]] * 2  # id 2 twice; 0 and 1 once each: the tie goes to the smaller id


def test_eq4_prompts_go_after_cls_before_the_patches_without_position_embeddings() -> None:
    torch.manual_seed(0)
    vit = ViT(32, 8, 3, 64, 0, 4).eval()  # depth 0: the output is the normed input tokens
    x, prompts = torch.randn(2, 3, 32, 32), torch.randn(2, 7, 64)
    out, plain = vit.run(x, prompts=prompts), vit.embed(x)
    assert out.shape == (2, 1 + 7 + 16, 64)
    assert torch.allclose(out[:, 0], vit.norm(plain[:, 0]))
    assert torch.allclose(out[:, 1:8], vit.norm(prompts))  # no position embedding on a prompt
    assert torch.allclose(out[:, 8:], vit.norm(plain[:, 1:]))


def test_eq5_the_feature_is_the_mean_output_at_the_prompt_positions() -> None:
    torch.manual_seed(0)
    params = L2PParams(l2p_pool_size=6, l2p_length=3, l2p_top_k=2)  # type: ignore[call-arg]
    features = L2PFeatures(ViT(32, 8, 3, 64, 0, 4).eval(), params)  # depth 0, as above
    x = torch.randn(2, 3, 32, 32)
    chosen, _ = features.pool.match(features.vit(x), 2, batchwise=False)
    expected = features.vit.norm(features.pool.prompts[chosen].flatten(1, 2)).mean(dim=1)
    assert torch.allclose(features(x), expected, atol=1e-6)


def test_eq6_the_loss_is_cross_entropy_minus_lambda_times_the_mean_key_query_similarity(tmp_path: Path) -> None:
    m = method(tmp_path, l2p_pull=0.7, l2p_batchwise=False)
    features = m.model.features
    assert isinstance(features, L2PFeatures)
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    with torch.no_grad():
        query = features.vit(x)
        chosen, _ = features.pool.match(query, 5, False)
        cos = nnf.cosine_similarity(query[:, None], features.pool.keys[chosen], dim=-1)  # (B, N)
        expected = nnf.cross_entropy(m.model(x), y) - 0.7 * cos.sum() / 4
        assert torch.allclose(m.step_loss(x, y), expected, atol=1e-5)


def test_eq7_only_prompts_keys_and_head_learn_the_vit_stays_bit_identical(tmp_path: Path) -> None:
    m = method(tmp_path)
    file = torch.load(tmp_path / "vit_tiny.pt", weights_only=True)
    before = {k: v.clone() for k, v in m.model.state_dict().items()}
    # as the task-free driver's optimiser: Adam over every parameter of the model, weight decay on
    # (not fused here: fused Adam's first call costs seconds of start-up on a CPU)
    optimizer = torch.optim.Adam(m.model.parameters(), lr=0.05, weight_decay=0.1)
    m.model.train()
    for _ in range(3):
        optimizer.zero_grad()
        m.step_loss(torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])).backward()
        optimizer.step()
    after = m.model.state_dict()
    vit = {k.removeprefix("features.vit."): v for k, v in after.items() if k.startswith("features.vit.")}
    assert set(vit) == {k.removeprefix("features.") for k in file if k.startswith("features.")}
    assert all(torch.equal(vit[k], file[f"features.{k}"]) for k in vit)  # the file's weights, bit for bit
    learned = ("features.pool.prompts", "features.pool.keys", "fc.weight", "fc.bias")
    assert all(not torch.equal(before[k], after[k]) for k in learned)
