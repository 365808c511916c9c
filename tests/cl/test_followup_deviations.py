"""The three labelled deviations from the follow-up's code, each a run option (issue 29 item 2;
docs/anytime.md, "Deviations from the follow-up's code"): the Si-Blurry pool's order
(`pool_order`), SCR's views (`scr_views`), MIR's batch-norm mode while scoring (`mir_score_mode`).
Each test checks the option changes what it says and nothing else."""

from __future__ import annotations

import pytest
import torch
from support.online_helpers import built, feed
from torchvision.transforms.v2 import functional as tvf

from rmconsole.cl import augment_scr as R
from rmconsole.cl import streams_iblurry as S

# ------------------------------------------------------------------------------ pool order


def _sorted_labels(n_classes: int = 20, per_class: int = 50) -> torch.Tensor:
    """A dataset stored class by class, as an ImageFolder tree is."""
    return torch.arange(n_classes).repeat_interleave(per_class)


def _touched(labels: torch.Tensor, split: S.BlurrySplit, per_class: int = 50) -> set[int]:
    """The blurry classes that gave samples to the pool: fewer than all their samples in their task."""
    out = set()
    for t, group in enumerate(split.blurry):
        kept = torch.bincount(labels[split.tasks[t]], minlength=int(labels.max()) + 1)
        out |= {c for c in group if int(kept[c]) < per_class}
    return out


@pytest.mark.parametrize("kind", ["iblurry", "siblurry"])
def test_dataset_pool_order_pools_whole_classes_on_a_class_sorted_dataset(kind: str) -> None:
    labels = _sorted_labels()
    shuffled = S.make_split(kind, labels, 5, 20, 50, 10, seed=1, pool_order="shuffled")
    stored = S.make_split(kind, labels, 5, 20, 50, 10, seed=1, pool_order="dataset")
    # the sampler's own draws are the same: classes per task and task sizes
    assert stored.disjoint == shuffled.disjoint and stored.blurry == shuffled.blurry
    assert [len(t) for t in stored.tasks] == [len(t) for t in shuffled.tasks]
    # storage order: the pool (smaller than a class here) takes only each task's first blurry
    # class in storage order; every other blurry class keeps all its samples
    firsts = {min(group) for group in stored.blurry if group}
    assert _touched(labels, stored) <= firsts
    # a random share touches more classes than there are tasks
    assert len(_touched(labels, shuffled)) > len(firsts) >= len(_touched(labels, stored))
    # what each task gave to the pool: one class per chunk in storage order, several shuffled
    per_chunk = [len(labels[p].unique()) for p in stored.pooled if len(p)]
    per_chunk_shuffled = [len(labels[p].unique()) for p in shuffled.pooled if len(p) > 2]
    assert per_chunk and max(per_chunk) == 1
    assert per_chunk_shuffled and min(per_chunk_shuffled) >= 2


def test_pool_order_is_the_same_draw_on_an_interleaved_dataset_up_to_which_samples() -> None:
    labels = torch.arange(10).repeat(100)  # stored interleaved, as torchvision's MNIST and CIFAR
    a = S.iblurry_split(labels, 5, 10, 50, 10, seed=2, pool_order="shuffled")
    b = S.iblurry_split(labels, 5, 10, 50, 10, seed=2, pool_order="dataset")
    counts = [torch.bincount(labels[t], minlength=10) for t in a.tasks]
    counts_b = [torch.bincount(labels[t], minlength=10) for t in b.tasks]
    assert [len(t) for t in a.tasks] == [len(t) for t in b.tasks]
    assert all((x - y).abs().max() <= 12 for x, y in zip(counts, counts_b))  # same shape, another draw
    assert any(not torch.equal(x, y) for x, y in zip(a.tasks, b.tasks))


def test_an_unknown_pool_order_is_one_clear_line() -> None:
    with pytest.raises(ValueError, match="pool_order must be one of shuffled, dataset"):
        S.iblurry_split(_sorted_labels(), 5, 20, 50, 10, seed=1, pool_order="random")


# ------------------------------------------------------------------------------ MIR's batch-norm mode


def _buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: b.clone() for n, b in model.named_buffers()}


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_mir_train_mode_scoring_moves_batch_norm_statistics_and_eval_mode_does_not(mode: str) -> None:
    m, proto, _ = built("mir", mir_candidates=20, augment="none", mir_score_mode=mode)
    feed(m, proto, 120)
    stream = torch.cat(proto.tasks)[120:124]
    x_s = m.setup.augmenter.train(m.images_of(stream))
    before = _buffers(m.model)
    m.retrieve(x_s, m.labels_of(stream), m.memory.indices[:20].clone(), 4)
    after = _buffers(m.model)
    tracked = [n for n in before if n.endswith("num_batches_tracked")]
    means = [n for n in before if n.endswith("running_mean")]
    assert tracked and means  # the MLP has batch norm
    if mode == "eval":
        assert all(torch.equal(before[n], after[n]) for n in before)
    else:
        # the look-ahead's stream forward and the scoring forward at theta; theta' runs on a copy
        assert all(int(after[n]) == int(before[n]) + 2 for n in tracked)
        assert all(not torch.equal(before[n], after[n]) for n in means)


def test_mir_train_mode_scores_with_the_candidates_batch_statistics() -> None:
    """train mode is not eval mode plus a side effect: the scores (so the choice) differ."""
    chosen = {}
    for mode in ("eval", "train"):
        m, proto, _ = built("mir", mir_candidates=20, augment="none", mir_score_mode=mode)
        feed(m, proto, 120)
        stream = torch.cat(proto.tasks)[120:124]
        x_s = m.setup.augmenter.train(m.images_of(stream))
        chosen[mode] = m.retrieve(x_s, m.labels_of(stream), m.memory.indices[:20].clone(), 4).tolist()
    assert chosen["eval"] != chosen["train"]


# ------------------------------------------------------------------------------ SCR's views


def test_scr_recipe_views_are_the_clean_batch_and_scrs_recipe_of_it() -> None:
    m, proto, _ = built("scr", scr_views="recipe", augment="none")
    aug = m.setup.augmenter
    pipeline_state = aug.gen.get_state()
    seen = []
    original = m.step_loss

    def spy(x, y):  # type: ignore[no-untyped-def]
        seen.append((x.clone(), y.clone(), recipe_state))
        return original(x, y)

    draws = []
    real_memory_draw = m.memory_draw

    def memory_draw(n):  # type: ignore[no-untyped-def]
        nonlocal recipe_state
        out = real_memory_draw(n)
        recipe_state = m.recipe_gen.get_state()  # the recipe draws after the batch is known
        draws.append(out)
        return out

    recipe_state = m.recipe_gen.get_state()
    m.step_loss = spy
    m.memory_draw = memory_draw
    stream = feed(m, proto, 40)
    assert seen
    x, y, state = seen[-1]
    half = len(x) // 2
    batch = torch.cat([torch.tensor(stream[-4:]), draws[-1]])
    images = m.images_of(batch)
    assert torch.equal(y[:half], m.labels_of(batch)) and torch.equal(y[half:], y[:half])
    assert torch.equal(x[:half], aug.test(images))  # view 1: the clean images
    gen = torch.Generator()
    gen.set_state(state)
    assert torch.allclose(x[half:], R.recipe_view(images, gen, aug.mean, aug.std))  # view 2: the recipe
    assert torch.equal(aug.gen.get_state(), pipeline_state)  # the run's pipeline drew nothing


def test_scr_pipeline_views_draw_from_the_runs_pipeline() -> None:
    m, proto, _ = built("scr", augment="none")
    state = m.recipe_gen.get_state()
    pipeline_state = m.setup.augmenter.gen.get_state()
    feed(m, proto, 40)
    assert torch.equal(m.recipe_gen.get_state(), state)
    assert not torch.equal(m.setup.augmenter.gen.get_state(), pipeline_state)


def _identity_draw(n: int, factors: list[float], gray: bool = False) -> R.RecipeDraw:
    theta = torch.tensor([[1.0, 0, 0], [0, 1.0, 0]]).expand(n, 2, 3).clone()
    return R.RecipeDraw(theta, torch.tensor([factors] * n), torch.full((n,), gray))


@pytest.mark.parametrize(
    "factors, reference",
    [
        ([1.3, 1.0, 1.0, 0.0], lambda x: tvf.adjust_brightness(x, 1.3)),
        ([1.0, 0.7, 1.0, 0.0], lambda x: tvf.adjust_contrast(x, 0.7)),
        ([1.0, 1.0, 1.35, 0.0], lambda x: tvf.adjust_saturation(x, 1.35)),
        ([1.0, 1.0, 1.0, 0.08], lambda x: tvf.adjust_hue(x, 0.08)),
        ([1.0, 1.0, 1.0, -0.1], lambda x: tvf.adjust_hue(x, -0.1)),
    ],
)
def test_recipe_colour_ops_equal_torchvision(factors, reference) -> None:  # type: ignore[no-untyped-def]
    images = (torch.rand(3, 3, 9, 9, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8)
    ours = R.recipe_apply(images, _identity_draw(3, factors))
    theirs = reference(images.float() / 255)
    assert torch.allclose(ours, theirs, atol=2e-5)


def test_recipe_greyscale_flip_and_crop() -> None:
    images = (torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(1)) * 255).to(torch.uint8)
    grey = R.recipe_apply(images, _identity_draw(2, [1.0, 1.0, 1.0, 0.0], gray=True))
    assert torch.allclose(grey, tvf.rgb_to_grayscale(images.float() / 255, 3), atol=2e-5)
    flip = _identity_draw(2, [1.0, 1.0, 1.0, 0.0])
    flip.theta[:, 0, 0] = -1.0
    assert torch.allclose(R.recipe_apply(images, flip), images.float().flip(-1) / 255, atol=1e-6)
    # per-sample draws: the same image twice gets two different views, every crop within the image
    same = images[:1].expand(64, 3, 8, 8)
    draw = R.recipe_draw(64, 8, 8, torch.Generator().manual_seed(2))
    views = R.recipe_apply(same, draw)
    assert len({tuple(v.flatten().tolist()) for v in views}) == 64
    scale_x, scale_y = draw.theta[:, 0, 0].abs(), draw.theta[:, 1, 1]
    assert bool((draw.theta[:, 0, 2].abs() + scale_x <= 1 + 1e-6).all())
    assert bool((draw.theta[:, 1, 2].abs() + scale_y <= 1 + 1e-6).all())
    assert float((scale_x * scale_y).min()) >= 0.2 - 0.1 and float((scale_x * scale_y).max()) <= 1.0
    assert 0.35 < float((draw.theta[:, 0, 0] < 0).float().mean()) < 0.65  # flips at p 0.5
    assert 0.05 < float(draw.gray.float().mean()) < 0.4  # greyscale at p 0.2


def test_the_runs_pool_order_reaches_its_stream() -> None:
    from support.online_helpers import config, tiny_data

    from rmconsole.cl.online import build_online_protocol

    data = tiny_data()
    shuffled = build_online_protocol(config(method="er"), data)
    stored = build_online_protocol(config(method="er", pool_order="dataset"), data)
    assert [len(t) for t in shuffled.tasks] == [len(t) for t in stored.tasks]
    assert any(not torch.equal(a, b) for a, b in zip(shuffled.tasks, stored.tasks))
