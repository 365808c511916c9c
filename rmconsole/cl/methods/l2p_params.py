"""L2P's own hyper-parameters (Wang et al., CVPR 2022): the prompt pool and its key matching.

Torch-free (config.py validates a run's keys without importing torch); the method reads them as
`self.params`, typed by `Method[L2PParams]`. Defaults: the paper's (M = 10, L_p = 5, N = 5) and
the authors' PyTorch reimplementation's CIFAR-100 config (pull constraint 0.1, batch-wise prompt
selection in training).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class L2PParams(MethodParams):
    """L2P: a pool of prompts with learnable keys; the top-N keys nearest the frozen [CLS] query pick the prompts."""

    l2p_pool_size: int = param(10, "L2P: prompts in the pool (M)", ge=1)
    l2p_length: int = param(5, "L2P: tokens per prompt (L_p)", ge=1)
    l2p_top_k: int = param(5, "L2P: prompts chosen per input (N), by key-query cosine similarity", ge=1)
    l2p_pull: float = param(0.1, "L2P: weight of the surrogate loss pulling chosen keys to the query (lambda)", ge=0)
    l2p_batchwise: bool = param(
        True,
        "L2P: in training, the N prompts chosen most often in the batch serve the whole batch (the authors' "
        "batch-wise selection); at inference each image has its own",
    )
