"""The online rehearsal methods of 2022-2023 (issue 40): PCR, each pinned on its defining mechanism."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as nnf
from support.online_helpers import Recorder, built, config, feed, tiny_data

from rmconsole.cl.loop import run_protocol

# ------------------------------------------------------------------------------ PCR


def test_pcr_loss_contrasts_each_anchor_with_the_proxies_of_the_batch_only() -> None:
    from rmconsole.cl.methods.pcr import proxy_contrastive_loss

    torch.manual_seed(0)
    features = torch.randn(5, 3)
    proxies = torch.randn(6, 3, requires_grad=True)  # 6 classes; the batch holds 0, 0, 2, 2, 4
    y = torch.tensor([0, 0, 2, 4, 2])
    tau = 0.5
    loss = proxy_contrastive_loss(features, proxies, y, tau)
    # by hand: anchor i against the proxy of every sample j (a class once per sample of it)
    z = features / features.norm(dim=1, keepdim=True)
    w = proxies.detach() / proxies.detach().norm(dim=1, keepdim=True)
    expected = 0.0
    for i in range(5):
        terms = [math.exp(float(z[i] @ w[int(y[j])]) / tau) for j in range(5)]
        expected -= math.log(math.exp(float(z[i] @ w[int(y[i])]) / tau) / sum(terms))
    assert float(loss.detach()) == pytest.approx(expected / 5, rel=1e-5)
    loss.backward()
    assert proxies.grad is not None
    assert torch.all(proxies.grad[[1, 3, 5]] == 0)  # classes absent from the batch: neither pushed nor pulled
    assert torch.all(proxies.grad[[0, 2, 4]].abs().sum(1) > 0)
    scale = proxy_contrastive_loss(features, proxies.detach() * 3.0, y, tau)
    assert float(scale) == pytest.approx(float(loss.detach()), rel=1e-5)  # cosine: the proxies' norms do not count


def test_pcr_loss_falls_as_features_align_with_their_proxy() -> None:
    from rmconsole.cl.methods.pcr import proxy_contrastive_loss

    proxies = torch.eye(3)
    y = torch.tensor([0, 1, 2])
    aligned = proxy_contrastive_loss(torch.eye(3) * 4.0, proxies, y, 0.1)
    swapped = proxy_contrastive_loss(torch.eye(3)[[1, 2, 0]], proxies, y, 0.1)
    assert float(aligned) < 1e-3 < float(swapped)
    # temperature: a lower one sharpens (aligned loss even smaller, misaligned larger)
    assert float(proxy_contrastive_loss(torch.eye(3)[[1, 2, 0]], proxies, y, 0.05)) > float(swapped)


def test_pcr_predicts_the_nearest_proxy_by_cosine_among_seen_classes() -> None:
    m, proto, _ = built("pcr")
    feed(m, proto, 48)
    x = m.setup.augmenter.test(m.images_of(torch.cat(proto.tasks)[48:80]))
    with torch.no_grad():
        m.model.fc.bias.copy_(torch.linspace(-50, 50, m.n_classes))  # the bias is not PCR's classifier
    pred = m.predict(x)
    m.model.eval()
    with torch.no_grad():
        f = nnf.normalize(m.model.features(x), dim=1)
        w = nnf.normalize(m.model.fc.weight, dim=1)
        scores = (f @ w.T).masked_fill(~m.seen, -1e9)
    assert pred.tolist() == scores.argmax(1).tolist()
    assert set(pred.tolist()) <= set(m.seen.nonzero().flatten().tolist())
    scaled = m.class_scores(x)
    assert torch.allclose(scaled[:, m.seen], (f @ w.T)[:, m.seen] / m.params.pcr_temperature, atol=1e-4)


def test_pcr_trains_two_views_of_stream_plus_memory_and_keeps_a_new_class_proxy() -> None:
    m, proto, _ = built("pcr")
    steps = []
    original = m.step_loss

    def spy(x, y):  # type: ignore[no-untyped-def]
        steps.append(len(x))
        assert torch.equal(y[: len(y) // 2], y[len(y) // 2 :])  # each sample twice
        return original(x, y)

    m.step_loss = spy
    before = m.model.fc.weight.detach().clone()
    stream = feed(m, proto, 40)
    assert steps[0] == 8 and steps[-1] == 16  # 4 stream (x2) while the memory is empty, then 4 + 4 (x2)
    assert not torch.equal(m.model.fc.weight, before)  # the proxies learn
    unseen = int((~m.seen).nonzero()[0])
    row = m.model.fc.weight[unseen].detach().clone()
    assert torch.equal(row, before[unseen])  # a class no batch has held: its proxy untouched
    m.online_new_class(unseen)
    assert torch.equal(m.model.fc.weight[unseen], row)  # and kept as it is at its arrival
    assert len(stream) == 40


def test_pcr_runs_the_protocol_to_its_end() -> None:
    rec = Recorder()
    outcomes = run_protocol(config(method="pcr", eval_period=60), tiny_data(per_class=16), torch.device("cpu"), rec)
    assert len(outcomes) == 5 and rec.points and all(0 <= p.accuracy <= 100 for p in rec.points)
    assert rec.points[-1].accuracy > 30  # it learns: chance on 10 classes is 10
