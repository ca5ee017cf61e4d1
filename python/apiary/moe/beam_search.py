"""MoEBeamSearcher (hivemind's ``moe/client/beam_search.py``): the best experts of a
grid for given grid scores, found by apiary's C++ beam search over the DHT (every
sample's lookups of a step in one ``get_many``; prefixes found empty cached)."""
from typing import List, Sequence, Tuple, Union

import numpy as np
import torch

from .. import _apiary
from ..dht import DHT
from .client import DEFAULT_TIMEOUT, RemoteExpert
from .expert_uid import ExpertInfo

Scores = Sequence[Union[torch.Tensor, np.ndarray, Sequence[float]]]


def _rows(grid_scores: Scores) -> List[List[float]]:
    rows = []
    for scores in grid_scores:
        if isinstance(scores, torch.Tensor):
            scores = scores.detach().cpu().to(torch.float64).numpy()
        # A coordinate ruled out (-inf, as grid dropout makes) ranks below every other.
        rows.append(np.nan_to_num(np.asarray(scores, dtype=np.float64), neginf=-1e30).tolist())
    return rows


class MoEBeamSearcher:
    """Finds experts ``<uid_prefix><c1>.<c2>...`` of a grid of ``grid_size`` declared
    in ``dht``. ``negative_caching``: prefixes with no experts are remembered (and stored
    in the DHT) for ``cache_expiration`` seconds, which delays new experts there."""

    def __init__(self, dht: DHT, uid_prefix: str, grid_size: Sequence[int], num_workers: int = None,
                 negative_caching: bool = True, cache_expiration: float = 300, timeout: float = DEFAULT_TIMEOUT,
                 **_: object):
        self.dht, self.uid_prefix, self.grid_size = dht, uid_prefix, tuple(int(g) for g in grid_size)
        self.negative_caching, self.cache_expiration, self.timeout = negative_caching, cache_expiration, timeout
        self._native = _apiary.MoEBeamSearcher(dht._require(), uid_prefix, list(self.grid_size), negative_caching,
                                               cache_expiration, timeout)
        self._experts = {}  # (uid, address) -> RemoteExpert, reused across searches

    def _expert(self, uid: str, address: str) -> RemoteExpert:
        key = (uid, address)
        if key not in self._experts:
            self._experts[key] = RemoteExpert(ExpertInfo(uid, address), self.dht, self.timeout)
        return self._experts[key]

    def find_best_experts(self, grid_scores: Scores, beam_size: int) -> List[RemoteExpert]:
        """The best ``beam_size`` declared experts for one sample's ``grid_scores`` (per
        dimension, a score per coordinate), best first."""
        return self.batch_find_best_experts([grid_scores], beam_size)[0]

    def batch_find_best_experts(self, batch_grid_scores: Union[Scores, Sequence[Scores]],
                                beam_size: int) -> List[List[RemoteExpert]]:
        """find_best_experts for every sample: either a list of per-sample grid scores, or
        (as hivemind) one [batch, size] tensor per dimension."""
        if len(batch_grid_scores) and isinstance(batch_grid_scores[0], torch.Tensor) and \
                batch_grid_scores[0].ndim == 2:
            batch = [_rows([dim[i] for dim in batch_grid_scores]) for i in range(len(batch_grid_scores[0]))]
        else:
            batch = [_rows(sample) for sample in batch_grid_scores]
        found = self._native.batch_find_best_experts(batch, beam_size)
        return [[self._expert(uid, address) for uid, address, _ in sample] for sample in found]

    def get_initial_beam(self, scores: Sequence[float], beam_size: int) -> List[Tuple[float, str, dict]]:
        """Up to beam_size prefixes of the first dimension with experts, best first:
        (score, prefix, {coordinate: ExpertInfo})."""
        beam = self._native.get_initial_beam(_rows([scores])[0], beam_size)
        return [(score, prefix, {c: ExpertInfo(*info) for c, info in successors.items()})
                for score, prefix, successors in beam]

    def get_active_successors(self, prefixes: Sequence[str], grid_size: int = None) -> dict:
        """prefix -> {coordinate: ExpertInfo} of its populated next coordinates."""
        found = self._native.get_active_successors(list(prefixes), grid_size)
        return {p: {c: ExpertInfo(*info) for c, info in s.items()} for p, s in found.items()}

    @property
    def negative_cache_size(self) -> int:
        return self._native.negative_cache_size()

    @property
    def lookups(self) -> int:
        """Prefixes fetched from the DHT so far."""
        return self._native.lookups()
