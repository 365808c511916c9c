"""CODA-Prompt's own hyper-parameters (Smith et al., CVPR 2023): its prompt components and the
layers they prefix.

Torch-free (config.py validates a run's keys without importing torch); the method reads them as
`self.params`, typed by `Method[CODAParams]`. Defaults: the paper's (100 components of length 8,
prefix-tuning on layers 1-5; the orthogonality loss off, as the authors' ImageNet-R configuration
runs it, the orthogonal initialisation on).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class CODAParams(MethodParams):
    """CODA-Prompt: attention-weighted prompt components, a block of new (orthogonal) ones per task."""

    coda_components: int = param(100, "CODA-Prompt: prompt components M (split evenly over the n_tasks tasks)", ge=1)
    coda_length: int = param(8, "CODA-Prompt: component length (half prefix keys, half values)", ge=2)
    coda_layers: int = param(5, "CODA-Prompt: prefix-tuned layers 0 .. coda_layers-1 (paper: 1-5)", ge=1)
    coda_ortho: float = param(0.0, "CODA-Prompt: weight of the orthogonality loss on components, keys, attention", ge=0)
