"""The kNN-on-frozen-features baseline (ACM, Prabhu et al. 2023): the vote of the k nearest
stored features by the paper's distance, ties to the smallest label, a frozen backbone."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rmconsole.cl.methods import REGISTRY
from rmconsole.cl.methods.knn import KNN
from rmconsole.cl.methods.knn_params import KNNParams


def bank(k: int, metric: str, xs: list[list[float]], ys: list[int]) -> KNN:
    """A KNN holding a feature bank, without a run around it (only `votes` is exercised)."""
    method = KNN.__new__(KNN)
    method.params = KNNParams(knn_k=k, knn_metric=metric)  # type: ignore[call-arg]
    method.n_classes = 4
    method.bank_x = torch.tensor(xs)
    method.bank_y = torch.tensor(ys)
    return method


def test_the_paper_defaults_are_k_1_and_cosine() -> None:
    assert (KNNParams().knn_k, KNNParams().knn_metric) == (1, "cosine")
    assert REGISTRY["knn"].protocols == ("task-free",)


def test_cosine_and_l2_pick_different_nearest_neighbours() -> None:
    # the query (1, 0): at the same angle as (10, 0) (label 2), nearer in L2 to (0.5, 0.6) (label 1)
    xs, ys = [[10.0, 0.0], [0.5, 0.6]], [2, 1]
    query = torch.tensor([[1.0, 0.0]])
    assert bank(1, "cosine", xs, ys).votes(query).argmax(1).tolist() == [2]
    assert bank(1, "l2", xs, ys).votes(query).argmax(1).tolist() == [1]


def test_k_neighbours_vote_and_a_tie_goes_to_the_smallest_label() -> None:
    xs = [[1.0, 0.0], [0.99, 0.1], [0.98, 0.2], [0.0, 1.0]]
    majority = bank(3, "cosine", xs, [3, 0, 3, 1]).votes(torch.tensor([[1.0, 0.0]]))
    assert majority.tolist() == [[1.0, 0.0, 0.0, 2.0]] and majority.argmax(1).tolist() == [3]
    tie = bank(2, "cosine", xs, [3, 2, 0, 0]).votes(torch.tensor([[1.0, 0.0]]))
    assert tie.tolist() == [[0.0, 0.0, 1.0, 1.0]] and tie.argmax(1).tolist() == [2]


def test_an_empty_bank_votes_for_nothing_and_k_beyond_the_bank_is_clipped() -> None:
    empty = bank(1, "cosine", [], [])
    empty.bank_x = torch.empty(0, 2)
    assert empty.votes(torch.ones(2, 2)).tolist() == [[0.0] * 4] * 2
    assert bank(5, "l2", [[0.0, 0.0]], [1]).votes(torch.zeros(1, 2)).tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_the_backbone_is_frozen() -> None:
    method = KNN.__new__(KNN)
    method.setup = SimpleNamespace(data=SimpleNamespace(image_shape=(1, 8, 8)))  # type: ignore[assignment]
    method.cfg = SimpleNamespace(model="mlp400", model_weights=None)  # type: ignore[assignment]
    method.n_classes, method.device, method.dist = 4, torch.device("cpu"), None
    method.accel = SimpleNamespace(prepare_model=lambda m: m)  # type: ignore[assignment]
    model = method.build_model()
    assert not any(p.requires_grad for p in model.parameters()) and not model.training
