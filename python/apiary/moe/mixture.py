"""RemoteMixtureOfExperts and RemoteSwitchMixtureOfExperts (hivemind's
``moe/client/moe.py`` and ``switch_moe.py``): a gating layer scores every coordinate of
an expert grid, a beam search over the DHT picks each sample's best declared experts,
every call of the batch goes out at once, and the outputs are mixed by the experts'
scores (failed experts masked out)."""
from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ..dht import DHT
from .beam_search import MoEBeamSearcher
from .call_many import Options, RemoteCallMany
from .client import DUMMY, RemoteExpert
from .expert_uid import UID_DELIMITER
from .schema import BatchTensorDescriptor


class RemoteMixtureOfExperts(nn.Module):
    """A mixture of the experts ``<uid_prefix><c1>.<c2>...`` of a grid of ``grid_size``
    declared in ``dht``: each sample goes to its ``k_best`` experts. The forward waits
    until every sample has ``k_min`` answers, then at most ``timeout_after_k_min`` more
    (and ``forward_timeout`` in all); fewer answers than k_min is an error. Backward the
    same with ``backward_k_min`` and ``backward_timeout``. ``detect_anomalies``: NaN or
    infinite inputs and gradients raise ValueError, and an expert answering with them is
    masked out. ``allow_zero_outputs``: a batch no expert answered gives zeros instead of
    raising."""

    def __init__(self, *, in_features: int, grid_size: Sequence[int], dht: DHT, uid_prefix: str, k_best: int,
                 k_min: int = 1, forward_timeout: Optional[float] = None, timeout_after_k_min: Optional[float] = None,
                 backward_k_min: int = 1, backward_timeout: Optional[float] = None, detect_anomalies: bool = False,
                 allow_zero_outputs: bool = False, **dht_kwargs: Any):
        super().__init__()
        self.dht, self.k_best = dht, k_best
        self.options = Options(k_min, backward_k_min, forward_timeout, timeout_after_k_min, backward_timeout,
                               detect_anomalies, allow_zero_outputs)
        self.beam_search = MoEBeamSearcher(dht, uid_prefix, grid_size, **dht_kwargs)
        self.proj = nn.Linear(in_features, sum(grid_size))
        self._expert_info: Optional[dict] = None

    def forward(self, input: torch.Tensor, *args: torch.Tensor, **kwargs: torch.Tensor) -> Any:
        grid_scores = self.proj(_gating_input(input)).split_with_sizes(self.beam_search.grid_size, dim=-1)
        chosen = self.beam_search.batch_find_best_experts([s.detach() for s in grid_scores], self.k_best)
        expert_mask, *expert_outputs = self._call_many(chosen, input, *args, **kwargs)
        logits = self.compute_expert_scores(grid_scores, chosen)
        logits = torch.where(expert_mask, logits, torch.full_like(logits, float("-inf")))
        weights = torch.softmax(logits, dim=1)
        weights = torch.where(expert_mask, weights, torch.zeros_like(weights))  # a sample with no answers
        return self._pack([_mix(weights, t) for t in expert_outputs])

    def _call_many(self, chosen: List[List[RemoteExpert]], *args: torch.Tensor,
                   **kwargs: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        if self._expert_info is None:
            found = [e for sample in chosen for e in sample]
            if not found:
                if not self.options.allow_zero_outputs:
                    raise TimeoutError(f"no experts of '{self.beam_search.uid_prefix}' found in the DHT")
                zeros = torch.zeros(len(chosen), 1, dtype=torch.bool)
                return (zeros, torch.zeros(len(chosen), 1, *args[0].shape[1:], dtype=args[0].dtype))
            self._expert_info = found[0].info
        flat = (*args, *(kwargs[k] for k in sorted(kwargs)))
        return RemoteCallMany.apply(DUMMY, chosen, self._outputs(), self.options, *flat)

    def _outputs(self) -> Sequence[BatchTensorDescriptor]:
        schema = self._expert_info["outputs_schema"] if self._expert_info else None
        return (schema,) if isinstance(schema, BatchTensorDescriptor) or schema is None else tuple(schema)

    def _pack(self, outputs: List[torch.Tensor]) -> Any:
        schema = self._expert_info["outputs_schema"] if self._expert_info else None
        return outputs[0] if schema is None or isinstance(schema, BatchTensorDescriptor) else tuple(outputs)

    def compute_expert_scores(self, grid_scores: Sequence[torch.Tensor],
                              batch_experts: List[List[RemoteExpert]]) -> torch.Tensor:
        """[batch, max experts]: per chosen expert, the sum of the grid scores of its
        coordinates (-inf where a sample chose fewer); gradients reach the gating."""
        return _expert_scores(grid_scores, batch_experts, self.beam_search.uid_prefix, torch.add, float("-inf"))


class RemoteSwitchMixtureOfExperts(RemoteMixtureOfExperts):
    """A switch-transformer mixture: one expert per sample (k_best 1, k_min 0 by default),
    inputs jittered by ``jitter_eps`` while training, coordinates dropped with probability
    1 - ``grid_dropout``, outputs weighted by the product of the per-dimension softmaxes.
    forward returns (outputs, balancing loss): the loss favors an even use of the grid
    (``utilization_alpha``: the decay of the running utilization)."""

    def __init__(self, *, grid_size: Sequence[int], utilization_alpha: float = 0.9, grid_dropout: float = 1.0,
                 jitter_eps: float = 1e-2, k_best: int = 1, k_min: int = 0, backward_k_min: int = 0,
                 allow_zero_outputs: bool = True, **kwargs: Any):
        super().__init__(grid_size=grid_size, k_best=k_best, k_min=k_min, backward_k_min=backward_k_min,
                         allow_zero_outputs=allow_zero_outputs, **kwargs)
        self.utilization_alpha, self.grid_dropout, self.jitter_eps = utilization_alpha, grid_dropout, jitter_eps
        self.grid_utilization = [torch.ones(size) / size for size in grid_size]

    def forward(self, input: torch.Tensor, *args: torch.Tensor, **kwargs: torch.Tensor) -> Tuple[Any, torch.Tensor]:
        if self.training and self.jitter_eps != 0:
            input = input * torch.empty_like(input).uniform_(1.0 - self.jitter_eps, 1.0 + self.jitter_eps)
        gating = _gating_input(input)
        grid_scores = self.proj(gating).split_with_sizes(self.beam_search.grid_size, dim=-1)
        kept = [torch.rand(size) < self.grid_dropout for size in self.beam_search.grid_size]
        grid_scores = [torch.where(k, s, torch.full_like(s, float("-inf"))) for s, k in zip(grid_scores, kept)]
        grid_softmax = [torch.softmax(s, dim=-1) for s in grid_scores]
        chosen = self.beam_search.batch_find_best_experts([s.detach() for s in grid_scores], self.k_best)
        expert_mask, *expert_outputs = self._call_many(chosen, input, *args, **kwargs)
        self._update_utilization(chosen, expert_mask)
        probs = _expert_scores(grid_softmax, chosen, self.beam_search.uid_prefix, torch.mul, 0.0)
        probs = torch.where(expert_mask, probs, torch.zeros_like(probs))
        outputs = self._pack([_mix(probs, t) for t in expert_outputs])
        balancing_loss = torch.stack([
            torch.mean(softmax.mean(0) * utilization) * size ** 2
            for softmax, utilization, size in zip(grid_softmax, self.grid_utilization, self.beam_search.grid_size)
        ]).sum()
        return outputs, balancing_loss

    def _update_utilization(self, chosen: List[List[RemoteExpert]], mask: torch.Tensor) -> None:
        prefix = self.beam_search.uid_prefix
        counts = [torch.zeros(size) for size in self.beam_search.grid_size]
        for i, sample in enumerate(chosen):
            for j, expert in enumerate(sample):
                if bool(mask[i, j]):
                    for dim, coord in enumerate(_coords(expert.uid, prefix)):
                        counts[dim][coord] += 1
        total = max(1, len(chosen))
        self.grid_utilization = [self.utilization_alpha * u + (1 - self.utilization_alpha) * c / total
                                 for u, c in zip(self.grid_utilization, counts)]

    def compute_expert_scores(self, grid_probs: Sequence[torch.Tensor],
                              batch_experts: List[List[RemoteExpert]]) -> torch.Tensor:
        """[batch, max experts]: per chosen expert, the product of its coordinates'
        probabilities (0 where a sample chose fewer)."""
        return _expert_scores(grid_probs, batch_experts, self.beam_search.uid_prefix, torch.mul, 0.0)


def _gating_input(input: torch.Tensor) -> torch.Tensor:
    """The input averaged over every dimension but the batch and the last."""
    return input.mean(dim=tuple(range(1, input.ndim - 1))) if input.ndim > 2 else input


def _mix(weights: torch.Tensor, outputs: torch.Tensor) -> torch.Tensor:
    """sum_j weights[i, j] * outputs[i, j, ...]."""
    flat = outputs.flatten(start_dim=2)
    return (weights[..., None] * flat).sum(dim=1).view(outputs.shape[:1] + outputs.shape[2:])


def _coords(uid: str, prefix: str) -> List[int]:
    return [int(c) for c in uid[len(prefix):].split(UID_DELIMITER)]


def _expert_scores(grid_scores: Sequence[torch.Tensor], batch_experts: List[List[RemoteExpert]], prefix: str,
                   combine: Any, fill: float) -> torch.Tensor:
    batch_size = len(batch_experts)
    max_experts = max([len(e) for e in batch_experts] + [1])
    dtype, device = grid_scores[0].dtype, grid_scores[0].device
    rows = [i for i, sample in enumerate(batch_experts) for _ in sample]
    cols = [j for sample in batch_experts for j in range(len(sample))]
    scores = torch.full((batch_size, max_experts), fill, dtype=dtype, device=device)
    if not rows:
        return scores
    coords = torch.as_tensor([_coords(e.uid, prefix) for sample in batch_experts for e in sample], device=device)
    rows_t = torch.as_tensor(rows, device=device)
    flat = None
    for dim, dim_scores in enumerate(grid_scores):
        part = dim_scores[rows_t, coords[:, dim]]
        flat = part if flat is None else combine(flat, part)
    return scores.index_put((rows_t, torch.as_tensor(cols, device=device)), flat)
