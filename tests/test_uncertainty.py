import torch

from rmconsole.cl.uncertainty import VR_VIEWS, perturbed_views, vote_uncertainty


def _images(n: int = 40) -> torch.Tensor:
    return torch.randint(0, 256, (n, 1, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def _score(predict, measure: str, views: int = 12):
    images = _images()
    return vote_uncertainty(predict, lambda idx: images[idx], torch.arange(len(images)), measure, views,
                            torch.Generator().manual_seed(1), lambda x: x.float() / 255, chunk_images=100)


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
    u, votes = vote_uncertainty(lambda x: logits[: len(x)], lambda idx: images[idx], torch.arange(2), "none", 12,
                                torch.Generator(), lambda x: x.float())
    assert votes is None
    assert torch.allclose(u, 1 - logits.softmax(-1).max(-1).values)


def test_vr_views_are_the_authors_twelve() -> None:
    views = perturbed_views(_images(3), "vr", 12, torch.Generator().manual_seed(0))
    assert views.shape == (12, 3, 1, 8, 8) and len(VR_VIEWS) == 12
    assert torch.equal(views[4], _images(3).flip(-1))  # hflip
    assert torch.equal(views[8], 255 - _images(3))  # invert
