"""apiary.optim.PowerSGDGradientAverager: hivemind's PowerSGDGradientAverager on apiary's averager.

A GradientAverager whose rounds average low-rank factors of the gradients instead of
the gradients (PowerSGD, https://arxiv.org/abs/1905.13727). A gradient viewed as an
m x n matrix M (tensors of three dimensions or more are folded greedily, as hivemind's
get_flatten_greedy_dims does) is averaged as P (m x r) and Q (n x r): two all-reduces on
one group per round, phase P then phase Q, and the averaged gradient is P Q^T. What a
round leaves out stays in a per-tensor error feedback and is sent in later rounds.
Tensors of one dimension, or whose factors would not save at least
``min_compression_ratio`` of their elements, are averaged plainly in phase Q.

The rounds run in the native averager (both phases, the error feedback and the
warm-started Q live there), so a round costs Python nothing between the phases. The
first Q of every tensor is seeded from the prefix: every peer starts from one subspace
(hivemind draws each peer's at random).
"""
import hashlib
from typing import Any, Iterable, Optional, Sequence

import torch

from .. import _apiary
from ..dht import DHT
from .grad_averager import GradientAverager


class PowerSGDGradientAverager(GradientAverager):
    """Averages accumulated gradients as rank-``averager_rank`` PowerSGD factors.

    :param parameters: the model's parameters
    :param averager_rank: the rank r of the factors (r * (m + n) values per m x n gradient)
    :param min_compression_ratio: compress a gradient only if its factors save at least
      this fraction of its elements (else it is averaged plainly)
    :param kwargs: GradientAverager's (reuse_grad_buffers, accumulate_grads_on, warn,
      averaged_grads) and DecentralizedAverager's options (prefix, target_group_size, ...)
    """

    def __init__(
        self,
        parameters: Iterable[torch.nn.Parameter],
        averager_rank: int,
        *,
        dht: DHT,
        prefix: str,
        reuse_grad_buffers: bool = False,
        accumulate_grads_on: Optional[torch.device] = None,
        client_mode: Optional[bool] = None,
        warn: bool = True,
        min_compression_ratio: float = 0.5,
        averaged_grads: Sequence[torch.Tensor] = (),
        **kwargs: Any,
    ):
        if isinstance(averager_rank, bool) or not isinstance(averager_rank, int) or averager_rank < 1:
            raise ValueError(f"expected an averager_rank >= 1, got {averager_rank!r}")
        if kwargs.get("identical_results"):
            raise ValueError("expected PowerSGD or identical_results, got both")
        parameters = tuple(parameters)
        self.rank = int(averager_rank)
        self.min_compression_ratio = float(min_compression_ratio)
        matrices = [tuple(_apiary.powersgd_matrix(list(p.shape), self.rank, self.min_compression_ratio))
                    for p in parameters]
        self._uncompressed_gradients_indexes = {i for i, (rows, _) in enumerate(matrices) if rows == 0}
        seed = int.from_bytes(hashlib.sha256(f"powersgd:{prefix}".encode()).digest()[:8], "little")
        self._powersgd = (self.rank, matrices, seed)
        super().__init__(parameters, dht=dht, prefix=prefix, reuse_grad_buffers=reuse_grad_buffers,
                         accumulate_grads_on=accumulate_grads_on, client_mode=client_mode, warn=warn,
                         averaged_grads=averaged_grads, **kwargs)

    @property
    def compressed_sizes(self) -> int:
        """Values this peer sends per round (P and Q of every compressed gradient, the plain
        gradients whole), against ``sum(p.numel())`` for plain averaging."""
        total = 0
        for i, (rows, cols) in enumerate(self._powersgd[1]):
            total += self.parameters[i].numel() if rows == 0 else self.rank * (rows + cols)
        return total
