"""The kNN-on-frozen-features baseline's own hyper-parameters (Prabhu et al. 2023's ACM).

Torch-free (config.py validates a run's keys without importing torch); the method reads them as
`self.params`, typed by `Method[KNNParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..settings import MethodParams, param


@dataclass(frozen=True)
class KNNParams(MethodParams):
    """ACM (Prabhu et al. 2023): k nearest neighbours over the frozen features of every streamed sample."""

    knn_k: int = param(1, "kNN: neighbours that vote (ACM's code: num_neighbours = 1)", ge=1)
    knn_metric: Literal["cosine", "l2"] = param(
        "cosine", "kNN: the distance between features (ACM's code: search_metric = cosine)"
    )
