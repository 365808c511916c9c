"""MVP's mechanics on the small ViT (random weights saved to a file), equation by equation as
cl/methods/mvp.py numbers them; docs/prompts.md maps each equation to its test here."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as nnf

from rmconsole.cl.methods.mvp import MVP, MVPFeatures, MVPModel, focal_scores
from rmconsole.cl.methods.mvp_params import MVPParams
from rmconsole.cl.models import build_model
from rmconsole.cl.vit import ViT

C = 5  # classes


def weights_file(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    path = tmp_path / "vit_tiny.pt"
    torch.save(build_model("vit_tiny", (3, 32, 32), C).state_dict(), path)
    return path


def method(tmp_path: Path, **params: object) -> MVP:
    """An MVP on the small ViT (2 layers: G-prompt on layer 0, E-prompts on layer 1) loaded from a
    file, without a run around it."""
    m = MVP.__new__(MVP)
    m.params = MVPParams(**{"mvp_g_end": 1, "mvp_e_end": 2, "mvp_e_length": 3, **params})  # type: ignore[arg-type]
    m.n_classes, m.device, m.dist = C, torch.device("cpu"), None
    m.cfg = SimpleNamespace(
        model="vit_tiny",
        model_weights=str(weights_file(tmp_path)),
        optimizer="adam",
        lr=0.05,
        weight_decay=0.1,  # decay would move any parameter the optimiser held with a gradient
        train_head=True,
        stream="siblurry",
        batch_size=4,
        n_tasks=3,
    )
    m.setup = SimpleNamespace(data=SimpleNamespace(image_shape=(3, 32, 32)))  # type: ignore[assignment]
    m.accel = SimpleNamespace(prepare_model=lambda model: model)  # type: ignore[assignment]
    m.seen = torch.ones(C, dtype=torch.bool)
    torch.manual_seed(1)
    m.model = m.build_model()
    return m


def features_of(m: MVP) -> MVPFeatures:
    assert isinstance(m.model, MVPModel)
    return m.model.features


def test_eq1_g_and_e_prompts_keys_and_masks_one_per_task_masks_start_at_minus_one(tmp_path: Path) -> None:
    f = features_of(method(tmp_path, mvp_g_length=2))
    assert f.g_prompts.shape == (1, 2, 64) and f.e_prompts.shape == (3, 1, 3, 64)  # pool = n_tasks = 3
    assert f.keys.shape == (3, 64) and f.masks.shape == (3, C) and bool((f.masks == -1).all())
    assert float(f.e_prompts.detach().min()) < 0 and float(f.keys.detach().min()) < 0  # N(0, 1), not uniform on [0, 1)
    assert torch.equal(f.counts, torch.zeros(3))


def test_eq2_prompts_are_appended_per_layer_and_dropped_after_it_without_position_embeddings() -> None:
    torch.manual_seed(0)
    vit = ViT(32, 8, 3, 64, 2, 4).eval()
    f = MVPFeatures(vit, MVPParams(mvp_g_end=1, mvp_e_end=2, mvp_g_length=2, mvp_e_length=3), C, 4)
    x, chosen = torch.randn(2, 3, 32, 32), torch.tensor([3, 1])
    with torch.no_grad():
        tokens = vit.embed(x)
        n = tokens.shape[1]
        tokens = vit.blocks[0](torch.cat([tokens, f.g_prompts[0].expand(2, -1, -1)], dim=1))[:, :n]
        tokens = vit.blocks[1](torch.cat([tokens, f.e_prompts[chosen][:, 0]], dim=1))[:, :n]
        expected = vit.norm(tokens)[:, 0]
        assert torch.allclose(f.run(x, chosen), expected, atol=1e-6)
        assert not torch.allclose(f.run(x, torch.tensor([0, 1])), expected, atol=1e-3)  # the E-prompt matters


def test_eq3_the_query_is_the_unprompted_cls_before_the_last_layer_unnormed(tmp_path: Path) -> None:
    f = features_of(method(tmp_path))
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = f.vit.blocks[0](f.vit.embed(x))[:, 0]  # 2 layers: all but the last = layer 0
        last = f.vit.blocks[1](f.vit.blocks[0](f.vit.embed(x)))[:, 0]
    query = f.query(x)
    assert torch.allclose(query, expected, atol=1e-6) and not query.requires_grad
    g = features_of(method(tmp_path, mvp_query_last_layer=True))
    assert torch.allclose(g.query(x), last, atol=1e-6)


def test_eq4_the_key_of_least_cosine_distance_scaled_by_usage_chooses(tmp_path: Path) -> None:
    f = features_of(method(tmp_path))
    with torch.no_grad():
        f.keys.zero_()
        f.keys[0, 0], f.keys[1, 1], f.keys[2, :2] = 5.0, 1.0, torch.tensor([1.0, 1.0])
    query = torch.zeros(2, 64)
    query[0, :2], query[1, :2] = torch.tensor([1.0, 0.3]), torch.tensor([0.2, 1.0])
    assert f.choose(query).tolist() == [0, 1]  # by angle, not by length (key 0 is long)
    f.counts.copy_(torch.tensor([3.0, 0.0, 0.0]))  # key 0 used 3 times: its distance x 4
    # query 0: d = 1 - cos = 0.042 for key 0 (x 4 = 0.169), 0.120 for key 2: key 2 now wins
    assert f.choose(query).tolist() == [2, 1]
    plain = features_of(method(tmp_path, mvp_contrastive=False))
    plain.keys.data.copy_(f.keys.data)
    plain.counts.copy_(f.counts)
    assert plain.choose(query).tolist() == [0, 1]  # without contrastive tuning usage does not count


def test_eq4_training_steps_count_the_choices_inference_does_not(tmp_path: Path) -> None:
    m = method(tmp_path)
    f = features_of(m)
    x = torch.randn(4, 3, 32, 32)
    chosen = f.choose(f.query(x))
    m.model(x), f(x)  # inference: logits, features
    assert torch.equal(f.counts, torch.zeros(3))
    m.step_loss(x, torch.tensor([0, 1, 2, 3]))
    assert torch.equal(f.counts, torch.bincount(chosen, minlength=3).float())


def test_eq5_logits_are_the_head_times_twice_the_sigmoid_of_the_chosen_keys_mask(tmp_path: Path) -> None:
    m = method(tmp_path)
    f = features_of(m)
    with torch.no_grad():
        f.masks.copy_(torch.randn(3, C))
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        chosen = f.choose(f.query(x))
        expected = m.model.fc(f(x)) * 2 * torch.sigmoid(f.masks[chosen])
        assert torch.allclose(m.model(x), expected, atol=1e-6)
        m.seen = torch.tensor([True, True, False, True, False])
        logits = m.logits(x)
        assert torch.allclose(logits[:, [0, 1, 3]], expected[:, [0, 1, 3]], atol=1e-6)
        assert bool((logits[:, [2, 4]] < -1e30).all())  # not exposed: masked out
        off = method(tmp_path, mvp_mask=False)
        assert torch.allclose(off.model(x), off.model.fc(features_of(off)(x)), atol=1e-6)


def test_eq6_the_contrastive_key_loss_pulls_the_chosen_key_and_pushes_the_others(tmp_path: Path) -> None:
    f = features_of(method(tmp_path))
    f.counts.copy_(torch.tensor([2.0, 1.0, 3.0]))  # every w > 1
    x = torch.randn(4, 3, 32, 32)
    _, _, loss = f.prompted(x, count=False)
    query = f.query(x)
    chosen = f.choose(query)
    expected = torch.zeros(())
    for b in range(4):
        s = int(chosen[b])
        w = float(f.counts[s]) + 1
        keys = f.keys.detach()
        p = math.exp((1 - float(nnf.cosine_similarity(query[b], keys[s], dim=0))) / w)
        a = sum(math.exp((1 - float(nnf.cosine_similarity(keys[s], keys[j], dim=0))) / w) for j in range(3)) / 3
        expected += -math.log(a / (p + a)) / 4
    assert torch.allclose(loss, expected, atol=1e-5)
    loss.backward()  # the chosen keys move; a key no image chose is only a (detached) negative
    assert f.keys.grad is not None
    unchosen = [j for j in range(3) if j not in chosen.tolist()]
    assert unchosen and all(float(f.keys.grad[j].abs().sum()) == 0 for j in unchosen)
    plain = features_of(method(tmp_path, mvp_contrastive=False))
    _, _, plain_loss = plain.prompted(x, count=False)
    q, k = plain.query(x), plain.keys[plain.choose(plain.query(x))]
    assert torch.allclose(plain_loss, (1 - nnf.cosine_similarity(q, k, dim=1)).mean(), atol=1e-6)


def test_eq7_the_focal_scores_are_the_per_sample_vs_batch_head_gradient_dissimilarity() -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(8, C)
    feats, y = torch.randn(6, 8), torch.tensor([0, 1, 1, 3, 0, 2])
    factor = 2 * torch.sigmoid(torch.randn(6, C))
    seen = torch.tensor([True, True, True, True, False])
    masked = (head(feats) * factor).masked_fill(~seen, torch.finfo(torch.float32).min)
    scores = focal_scores(feats, y, masked.detach(), factor)
    # by autograd, as the authors' code does it: one backward per sample, one for the batch
    batch = torch.autograd.grad(nnf.cross_entropy(masked, y), head.weight, retain_graph=True)[0]
    for i in range(6):
        own = torch.autograd.grad(nnf.cross_entropy(masked[i : i + 1], y[i : i + 1]), head.weight, retain_graph=True)[0]
        expected = 1 - nnf.cosine_similarity(own[y[i]], batch[y[i]], dim=0)
        assert torch.allclose(scores[i], expected, atol=1e-5)


def test_eq7_the_loss_is_the_focal_weighted_cross_entropy_on_scaled_features_plus_the_key_loss(
    tmp_path: Path,
) -> None:
    m = method(tmp_path, mvp_alpha=0.3, mvp_gamma=1.5, mvp_margin=0.25)
    f = features_of(m)
    with torch.no_grad():
        f.masks.copy_(torch.randn(3, C))
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 1, 3])
    m.seen = torch.tensor([True, True, True, True, False])
    with torch.no_grad():
        feature, factor, key_loss = f.prompted(x, count=False)
        fc = m.model.fc
        plain = m.exposed(fc(feature) * factor)
        scores = focal_scores(feature, y, plain, factor)
        scale = 1 - nnf.cosine_similarity(fc.weight[y], feature, dim=1) + 0.25
        ce = nnf.cross_entropy(m.exposed(fc(feature / scale[:, None]) * factor), y, reduction="none")
        expected = (ce * (0.7 + 0.3 * scores**1.5)).mean() + key_loss
        assert torch.allclose(m.step_loss(x, y), expected, atol=1e-5)
        off = method(tmp_path, mvp_gsf=False, mvp_afs=False, mvp_mask=False)
        g = features_of(off)
        feature, _, key_loss = g.prompted(x, count=False)
        expected = nnf.cross_entropy(off.exposed(off.model.fc(feature)), y) + key_loss
        assert torch.allclose(off.step_loss(x, y), expected, atol=1e-5)


def test_eq8_only_prompts_keys_masks_and_head_learn_the_vit_stays_bit_identical(tmp_path: Path) -> None:
    m = method(tmp_path)
    file = torch.load(tmp_path / "vit_tiny.pt", weights_only=True)
    before = {k: v.clone() for k, v in m.model.state_dict().items()}
    # as the task-free driver's optimiser: Adam over every parameter of the model, weight decay on
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
    learned = ("features.g_prompts", "features.e_prompts", "features.keys", "features.masks", "fc.weight")
    assert all(not torch.equal(before[k], after[k]) for k in learned)


def test_a_training_step_never_reads_a_tensor_on_the_host(tmp_path: Path) -> None:
    """No .item(), bool(tensor), int/float(tensor), .tolist(), .cpu() or .nonzero() in a step (each
    is a device-to-host sync on an accelerator): they raise here while the step and its backward run."""
    m = method(tmp_path)
    m.seen = torch.tensor([True, True, True, True, False])
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 1, 3])

    def host(*_: object, **__: object) -> None:
        raise AssertionError("host sync inside a training step")

    patch = pytest.MonkeyPatch()
    for name in ("item", "__bool__", "__int__", "__float__", "tolist", "cpu", "nonzero"):
        patch.setattr(torch.Tensor, name, host)
    try:
        m.step_loss(x, y).backward()
    finally:
        patch.undo()
    assert features_of(m).keys.grad is not None
