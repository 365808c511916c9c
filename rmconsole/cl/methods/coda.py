"""CODA-Prompt (Smith et al., CVPR 2023) on a frozen ViT (cl/vit.py), on the follow-up's
task-free streams.

The mechanics (docs/prompts.md maps each to its test in tests/cl/test_coda.py), per prompted layer:

(1) M prompt components P_m in R^{L x D}, keys K_m and attention vectors A_m in R^D; the M
    components split evenly over the run's n_tasks tasks: task t owns block [t M/T, (t+1) M/T);
(2) at the start of task t its block is (re)initialised orthogonal (Gram-Schmidt) to the blocks
    before it and orthonormal within (components flattened, keys, attention vectors each);
(3) the query q(x) = the frozen, unprompted ViT's [CLS] pre-logits feature;
(4) weights alpha_m = cos(q * A_m, K_m) (q scaled feature-wise by A_m; no softmax) over the
    components of tasks 0..t; the prompt p = sum_m alpha_m P_m, end to end differentiable;
(5) in training the earlier tasks' components, keys and attention are used but not learned
    (detached); later tasks' are not used;
(6) prefix-tuning: p's first L/2 tokens are prefix keys, its last L/2 values, at layers
    0 .. coda_layers-1; the classifier reads the [CLS] output;
(7) loss = CE (over exposed classes) + coda_ortho * (||K K^T - I||^2 + ||A A^T - I||^2 +
    ||P P^T - I||^2, each a mean over entries); only components, keys, attention and head learn:
    the ViT stays bit-identical.

Rehearsal-free: nothing enters the memory. Deviations (stated): the task whose block trains is
the stream's task (Si-Blurry's tasks have stochastic classes); no gradient clipping; the run's
optimiser and augmentation.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ..learner import Task
from ..models import Backbone
from ..vit import ViT
from .base import Method
from .coda_params import CODAParams
from .l2p import frozen_vit
from .taskfree import TaskFree


def gram_schmidt_block(matrix: Tensor, start: int, end: int, gen: torch.Generator) -> None:
    """Rows [start, end) of `matrix` (rows, features) replaced, in place, by random rows made
    orthogonal to rows [0, end) before them and of unit length (2)."""
    with torch.no_grad():
        fresh = torch.randn(end - start, matrix.shape[1], generator=gen).to(matrix.device, matrix.dtype)
        for i in range(end - start):
            v = fresh[i]
            before = torch.cat([matrix[:start], fresh[:i]]) if start or i else fresh[:0]
            if len(before):
                v = v - (nnf.normalize(before, dim=1) @ v) @ nnf.normalize(before, dim=1)
            fresh[i] = v / v.norm()
        matrix[start:end] = fresh


def ortho_penalty(t: Tensor) -> Tensor:
    """mean((t t^T - I)^2) over the rows of t (flattened)."""
    flat = t.flatten(1)
    return ((flat @ flat.T - torch.eye(len(flat), device=t.device)) ** 2).mean()


class CODAFeatures(nn.Module):
    """features(x): the [CLS] output with the components of tasks 0..task summed in."""

    task: Tensor

    def __init__(self, vit: ViT, params: CODAParams, n_tasks: int) -> None:
        super().__init__()
        if params.coda_layers > vit.depth:
            raise ValueError(f"coda_layers={params.coda_layers}: the ViT has {vit.depth} layers")
        if params.coda_components < n_tasks:
            raise ValueError(f"coda_components={params.coda_components}: fewer than the {n_tasks} tasks")
        self.vit, self.layers, self.length = vit, params.coda_layers, params.coda_length
        self.per_task = params.coda_components // n_tasks
        m, d = self.per_task * n_tasks, vit.dim
        self.P = nn.Parameter(torch.zeros(params.coda_layers, m, params.coda_length, d))
        self.K = nn.Parameter(torch.zeros(params.coda_layers, m, d))
        self.A = nn.Parameter(torch.zeros(params.coda_layers, m, d))
        self.register_buffer("task", torch.zeros((), dtype=torch.long))  # checkpointed
        self.current = 0  # the same, as a Python int: read in a step without a host sync

    def _load_from_state_dict(self, state: dict[str, Any], prefix: str, *args: Any) -> None:
        super()._load_from_state_dict(state, prefix, *args)
        if prefix + "task" in state:
            self.current = int(state[prefix + "task"])  # at a resume, not in a step

    def start_task(self, task: int, gen: torch.Generator) -> None:
        """(2) the task's block, orthogonal to the blocks before it, in every layer."""
        self.task.fill_(task)
        self.current = task
        s, f = task * self.per_task, (task + 1) * self.per_task
        for layer in range(self.layers):
            for param in (self.P, self.K, self.A):
                rows = param.data[layer].reshape(param.shape[1], -1)
                gram_schmidt_block(rows, s, f, gen)
                param.data[layer] = rows.reshape(param.shape[1:])

    def used(self, layer: int, training: bool) -> tuple[Tensor, Tensor, Tensor]:
        """(5) the components of tasks 0..task: earlier blocks detached in training."""
        end = self.per_task * (self.current + 1)
        s = end - self.per_task
        parts = []
        for param in (self.P, self.K, self.A):
            rows = param[layer, :end]
            parts.append(torch.cat([rows[:s].detach(), rows[s:]]) if training else rows)
        return parts[0], parts[1], parts[2]

    def prompts(self, query: Tensor, training: bool) -> dict[int, tuple[Tensor, Tensor]]:
        """(4), (6): layer -> (prefix keys, prefix values), each (B, L/2, D)."""
        out = {}
        half = self.length // 2
        for layer in range(self.layers):
            P, K, A = self.used(layer, training)
            alpha = nnf.cosine_similarity(query[:, None, :] * A[None], K[None], dim=-1, eps=1e-8)  # (B, m)
            p = torch.einsum("bm,mld->bld", alpha, P)
            out[layer] = (p[:, :half], p[:, half : 2 * half])
        return out

    def prompted(self, x: Tensor, training: bool) -> Tensor:
        with torch.no_grad():
            query = self.vit(x)  # (3)
        return self.vit.run(x, prefixes=self.prompts(query, training))[:, 0]

    def ortho_loss(self) -> Tensor:
        end = self.per_task * (self.current + 1)
        return sum(
            (ortho_penalty(p[layer, :end]) for layer in range(self.layers) for p in (self.K, self.A, self.P)),
            torch.zeros((), device=self.K.device),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.prompted(x, training=False)


class CODAPrompt(TaskFree, Method[CODAParams]):
    name = "coda"

    def build_model(self) -> Backbone:
        vit = frozen_vit(super().build_model(), self.name)
        return Backbone(CODAFeatures(vit, self.params, self.cfg.n_tasks), vit.dim, self.n_classes).to(self.device)

    @property
    def temp_batch_size(self) -> int:
        return self.cfg.batch_size  # rehearsal-free: the whole batch is stream

    def online_store(self, index: int, label: int) -> None:
        """Rehearsal-free: nothing is stored."""

    def online_task_start(self, task: Task) -> None:
        features = self.model.features
        assert isinstance(features, CODAFeatures)
        features.start_task(task.index, self.gen)

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        features = self.model.features
        assert isinstance(features, CODAFeatures)
        loss = nnf.cross_entropy(self.mask_unseen(self.model.fc(features.prompted(x, training=True))), y)
        if self.params.coda_ortho > 0:
            loss = loss + self.params.coda_ortho * features.ortho_loss()
        return loss
