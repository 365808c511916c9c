"""kNN on frozen features: the ACM baseline of Prabhu et al., "Online Continual Learning Without
the Storage Constraint" (2023), on any declared backbone.

What it does (the authors' code, drimpossible/ACM src/knn, read as a specification):
- the backbone is frozen: it is the run's model with its weights (`model_weights`: the
  pretrained features ACM relies on; their XCiT-DINO is not shipped here), never trained; its
  `features` (pre-logits) embed each image, in eval mode, on the clean (test-transformed) image;
- every streamed sample's feature and label are stored (no storage constraint: the feature bank
  grows with the stream; the image memory K is not used);
- a test image is classified by its `knn_k` nearest stored features (`knn_metric`: cosine
  similarity, or Euclidean distance) by majority vote, ties to the smallest label (scipy's /
  torch's mode, as the authors' code takes it). Class scores are the vote counts.
The authors' defaults are k = 1 and cosine (src/knn/opts.py); they search with HNSW (an
approximate index); this search is exact (brute force), which gives the same or better neighbours.

It runs on the task-free streams (i-Blurry, Si-Blurry), an online stream as ACM's: each arriving
sample is queued (`online_observe`) and the queue embedded and stored before each evaluation and
at each task end; predictions at an evaluation are therefore those of a bank holding every
sample seen so far, as the authors' predict-then-learn loop has it. The image memory stays empty
(nothing is replayed); the bank is not counted against K, by ACM's design (stated where its
numbers are shown: docs/prompts.md).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .base import Method, Task
from .knn_params import KNNParams
from .taskfree import TaskFree


class KNN(TaskFree, Method[KNNParams]):
    name = "knn"

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        dim = self.model.feature_dim
        self.bank_x = torch.empty(0, dim, device=self.device)
        self.bank_y = torch.empty(0, dtype=torch.long, device=self.device)
        self.pending: list[int] = []

    def build_model(self) -> Any:
        """The run's backbone, frozen: no parameter takes a gradient."""
        model = super().build_model()
        model.requires_grad_(False)
        return model.eval()

    def make_optimizer(self) -> torch.optim.Optimizer:
        """Nothing is trained: an optimiser over an empty placeholder, so the drivers' bookkeeping holds."""
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(0))], lr=0.0)

    # ------------------------------------------------------------------ the feature bank

    def store(self, idx: Tensor) -> None:
        """Embed train indices with the frozen backbone and add them to the bank."""
        if len(idx) == 0:
            return
        with torch.no_grad():
            feats = self.features_of(idx)
        self.bank_x = torch.cat([self.bank_x, feats.to(self.device)])
        self.bank_y = torch.cat([self.bank_y, self.labels_of(idx).to(self.device)])

    def flush(self) -> None:
        if self.pending:
            self.store(torch.tensor(self.pending, dtype=torch.long))
            self.pending = []

    # ------------------------------------------------------------------ task-free protocol

    def online_observe(self, index: int, label: int) -> None:
        self.pending.append(index)
        self.cost += 1.0  # one forward pass per sample

    def online_before_eval(self) -> None:
        self.flush()

    def online_task_end(self, task: Task) -> None:
        self.flush()

    def head_takes(self, label: int) -> None:
        """No head: nothing to extend."""

    # ------------------------------------------------------------------ inference

    def votes(self, feats: Tensor) -> Tensor:
        """(N, n_classes) vote counts of each query's k nearest stored features."""
        out = torch.zeros(len(feats), self.n_classes, device=feats.device)
        if len(self.bank_y) == 0:
            return out
        bank = self.bank_x.to(feats.device)
        if self.params.knn_metric == "cosine":
            closeness = nnf.normalize(feats, dim=1, eps=1e-6) @ nnf.normalize(bank, dim=1, eps=1e-6).T
        else:
            closeness = -torch.cdist(feats, bank)
        k = min(self.params.knn_k, len(self.bank_y))
        nearest = closeness.topk(k, dim=1).indices
        labels = self.bank_y.to(feats.device)[nearest]
        return out.scatter_add_(1, labels, torch.ones_like(labels, dtype=out.dtype))

    def logits(self, x: Tensor) -> Tensor:
        """Vote counts, the smallest label first among equal counts (arg-max takes the first)."""
        self.model.eval()
        return self.votes(self.model.features(x).float())

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["knn"] = {"x": self.bank_x.cpu(), "y": self.bank_y.cpu(), "pending": list(self.pending)}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.bank_x = state["knn"]["x"].to(self.device)
        self.bank_y = state["knn"]["y"].to(self.device)
        self.pending = list(state["knn"]["pending"])
