import pytest
import torch

from rmconsole.cl.uncertainty import VR_VIEWS, perturbed_views, vote_uncertainty


def _images(n: int = 40) -> torch.Tensor:
    return torch.randint(0, 256, (n, 1, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def _score(predict, measure: str, views: int = 12):
    images = _images()
    return vote_uncertainty(
        predict,
        lambda idx: images[idx],
        torch.arange(len(images)),
        measure,
        views,
        torch.Generator().manual_seed(1),
        lambda x: x.float() / 255,
        chunk_images=100,
    )


def test_constant_model_is_certain() -> None:
    u, votes = _score(lambda x: torch.tensor([0.0, 5.0, 1.0]).repeat(len(x), 1), "randaug")
    assert torch.all(u == 0) and torch.all(votes == 12)


def test_votes_in_range_and_u_formula() -> None:
    gen = torch.Generator().manual_seed(2)
    for measure in ("randaug", "autoaug", "vr"):
        u, votes = _score(lambda x: torch.randn(len(x), 10, generator=gen), measure)
        assert votes.min() >= 1 and votes.max() <= 12  # the top class always has at least one vote
        assert torch.allclose(u, 1 - votes.float() / 12)
        assert u.max() > 0  # random predictions disagree


def test_pixel_sensitive_model_sees_perturbations() -> None:
    """A model reading the mean brightness changes its vote under perturbation."""

    def predict(x: torch.Tensor) -> torch.Tensor:
        level = (x.mean(dim=(1, 2, 3)) * 10).long().clamp(0, 9)
        return torch.nn.functional.one_hot(level, 10).float()

    u, _ = _score(predict, "randaug")
    assert (u > 0).float().mean() > 0.3


def test_none_measure_is_least_confidence_without_votes() -> None:
    logits = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    images = _images(2)
    u, votes = vote_uncertainty(
        lambda x: logits[: len(x)],
        lambda idx: images[idx],
        torch.arange(2),
        "none",
        12,
        torch.Generator(),
        lambda x: x.float(),
    )
    assert votes is None
    assert torch.allclose(u, 1 - logits.softmax(-1).max(-1).values)


def test_vr_views_are_the_authors_twelve() -> None:
    images = _images(64)
    views = perturbed_views(images, "vr", 12, torch.Generator().manual_seed(0))
    assert views.shape == (12, 64, 1, 8, 8) and len(VR_VIEWS) == 12
    for v, axis in ((4, -1), (5, -2)):  # RandomHorizontalFlip / RandomVerticalFlip: p = 0.5 per sample
        flipped = torch.tensor(
            [torch.equal(a, b.flip(axis)) and not torch.equal(a, b) for a, b in zip(views[v], images)]
        )
        kept = torch.tensor([torch.equal(a, b) for a, b in zip(views[v], images)])
        assert bool((flipped | kept).all()) and 16 < int(flipped.sum()) < 48
    assert torch.equal(views[8], 255 - images)  # invert
    assert torch.equal(views[9], torch.where(images >= 128, 255 - images, images))  # solarize 128
    cut = views[0] != images  # cutout8 (1 pixel on 8x8 images... scaled: 2x2) at a per-sample centre
    assert cut.flatten(1).sum(1).max() <= 4 and len({tuple(c.nonzero()[0].tolist()) for c in cut if c.any()}) > 5


@pytest.mark.parametrize("measure", ["randaug", "autoaug", "vr"])
@pytest.mark.parametrize("views", [1, 5, 12, 20])
def test_vote_counts_within_zero_and_views(measure: str, views: int) -> None:
    """Whatever the number of views, the top vote count lies in [1, views] (the arg-max class
    always has a vote) and u = 1 - votes / views lies in [0, 1 - 1/views]."""
    gen = torch.Generator().manual_seed(views)
    u, votes = _score(lambda x: torch.randn(len(x), 10, generator=gen), measure, views)
    assert votes.dtype == torch.long and votes.shape == (40,)
    assert int(votes.min()) >= 1 and int(votes.max()) <= views
    assert torch.allclose(u, 1 - votes.float() / views)
    assert float(u.min()) >= 0 and float(u.max()) <= 1 - 1 / views + 1e-6


@pytest.mark.parametrize("measure", ["randaug", "autoaug", "vr"])
def test_views_differ_within_a_batch_and_between_views(measure: str) -> None:
    """Each view of each candidate is its own draw: 12 identical inputs do not get one perturbation."""
    one = _images(1).repeat(32, 1, 1, 1)
    views = perturbed_views(one, measure, 12, torch.Generator().manual_seed(0))
    distinct_in_view = max(len({bytes(img.flatten().tolist()) for img in view}) for view in views)
    distinct_views = len({bytes(v[0].flatten().tolist()) for v in views})
    assert distinct_in_view > 1 and distinct_views > 3


def test_every_candidate_is_scored_across_uneven_chunks() -> None:
    """40 candidates in chunks of 7 (84 images / 12 views): the last, partial chunk is scored too."""
    images = _images(40)
    for measure in ("randaug", "none"):
        u, votes = vote_uncertainty(
            lambda x: torch.tensor([0.0, 9.0]).repeat(len(x), 1),
            lambda idx: images[idx],
            torch.arange(40),
            measure,
            12,
            torch.Generator().manual_seed(3),
            lambda x: x.float() / 255,
            chunk_images=12 * 7,
        )
        assert u.shape == (40,) and bool(torch.isfinite(u).all())
        if measure == "randaug":
            assert votes.tolist() == [12] * 40 and u.abs().max() == 0
        else:
            assert torch.allclose(u, torch.full((40,), 1 - torch.tensor([0.0, 9.0]).softmax(0).max().item()))


def test_unknown_measure_and_no_views_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown uncertainty measure 'mc'"):
        _score(lambda x: torch.zeros(len(x), 3), "mc")
    with pytest.raises(ValueError, match="at least one view"):
        _score(lambda x: torch.zeros(len(x), 3), "randaug", 0)


@pytest.mark.parametrize("name", ["hflip", "vflip"])
def test_vr_flip_happens_when_the_draw_is_strictly_below_one_half(name: str) -> None:
    """torchvision's Random*Flip flips when rand < p: a draw of exactly 0.5 keeps its image
    (the generator seeded 479 draws exactly 0.5 at sample 1395 of 4096)."""
    from rmconsole.cl.uncertainty import _vr_view

    shape = (1, 1, 1, 2) if name == "hflip" else (1, 1, 2, 1)
    images = torch.tensor([0, 1], dtype=torch.uint8).view(shape).repeat(4096, 1, 1, 1)
    out = _vr_view(name, images, torch.Generator().manual_seed(479))
    draws = torch.rand(4096, generator=torch.Generator().manual_seed(479))
    assert float(draws[1395]) == 0.5
    assert torch.equal(out.flatten(1)[:, 0] == 1, draws < 0.5)


@pytest.mark.parametrize("measure", ["none", "vr"])
def test_progress_is_told_every_candidate_once_whatever_the_measure(measure: str) -> None:
    images = _images(30)
    told: list[int] = []
    vote_uncertainty(
        lambda x: x.float().flatten(1)[:, :3],
        lambda idx: images[idx],
        torch.arange(30),
        measure,
        4,
        torch.Generator().manual_seed(0),
        lambda x: x.float() / 255,
        chunk_images=48,  # 12 candidates of 4 views a chunk (48 of one view for `none`)
        progress=told.append,
    )
    assert told == ([30] if measure == "none" else [12, 12, 6])
