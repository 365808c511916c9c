"""ER-ACE (Caccia et al., ICLR 2022): experience replay with an asymmetric cross-entropy.

The incoming (stream) samples are scored only against the classes present among them: the
other logits are masked, so learning the new data never pushes old classes' logits down (the
abrupt representation change at a new class's arrival that ER suffers). The replayed memory
samples get the ordinary cross-entropy over every class seen so far. Loss = the two summed
(Caccia et al.'s ER-AML/ACE form). Batches and memory are the follow-up's ER (taskfree.py).

CutMix is not applied: mixing stream and memory images would mix the two losses the method
keeps apart (the run's other augmentations still apply).
"""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .base import Method
from .taskfree import TaskFree


def asymmetric_cross_entropy(logits: Tensor, y: Tensor, n_stream: int, seen: Tensor) -> Tensor:
    """CE of the first `n_stream` rows over the classes present in them, plus CE of the rest
    (memory) over the `seen` classes."""
    fill = torch.finfo(logits.dtype).min
    # index_fill_, not `present[idx] = True`: indexed assignment of a Python scalar makes a host
    # tensor that index_put_ copies to the device, which a CUDA graph capture refuses
    present = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device).index_fill_(0, y[:n_stream], True)
    loss = nnf.cross_entropy(logits[:n_stream].masked_fill(~present, fill), y[:n_stream])
    if n_stream < len(y):
        loss = loss + nnf.cross_entropy(logits[n_stream:].masked_fill(~seen, fill), y[n_stream:])
    return loss


class ERACE(TaskFree, Method):
    name = "er_ace"
    default_memory_policy = "reservoir"
    # captured as a CUDA graph (graphs.MethodStep): the classes present among the stream rows are
    # a mask made on the device from the batch's labels, the seen mask is updated in place, and
    # the stream count (which rows are stream) is the graph's key
    capturable_step = True

    def step_key(self, x: Tensor, y: Tensor) -> tuple[int]:
        return (self.stream_rows(y),)

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        n_stream = self.stream_rows(y)
        return asymmetric_cross_entropy(self.model(x), y, n_stream, self.seen)
