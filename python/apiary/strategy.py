"""AutoDist's strategy builders, by its class names and arguments, for
``apiary.autodist.AutoDist(strategy_builder=...)``. Each names a builder of
``core/strategy`` and carries its options; the strategy itself is built in C++ from the
model's variables and the resource spec, the same way on every trainer process.

- ``PS``, ``PSLoadBalancing``, ``PartitionedPS``, ``UnevenPartitionedPS``:
  ``local_proxy_variable``, ``sync``, ``staleness`` (0: bulk-synchronous; s > 0: at most
  s steps ahead of the slowest replica).
- ``AllReduce``: ``chunk_size`` (variables per fusion group), ``all_reduce_spec`` (AUTO,
  NCCL, RING; NCCL runs as RING without a GPU per replica), ``compressor``
  (NoneCompressor, HorovodCompressor: fp16, HorovodCompressorEF: fp16 with error
  feedback).
- ``PartitionedAR``: ``chunk_size``. ``RandomAxisPartitionAR``: ``chunk_size``, ``seed``.
- ``Parallax``: sparse variables on parameter servers, dense ones all-reduced:
  ``chunk_size``, ``sync``, ``staleness``.
"""
from typing import Any, Dict

__all__ = [
    "StrategyBuilder",
    "PS",
    "PSLoadBalancing",
    "PartitionedPS",
    "UnevenPartitionedPS",
    "AllReduce",
    "PartitionedAR",
    "RandomAxisPartitionAR",
    "Parallax",
]


class StrategyBuilder:
    """A builder's AutoDist class name and the options given to it."""

    name = ""

    def __init__(self, **options: Any):
        self.options: Dict[str, Any] = options

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({args})"


class _PsFamily(StrategyBuilder):
    def __init__(self, local_proxy_variable: bool = False, sync: bool = True, staleness: int = 0):
        super().__init__(local_proxy_variable=bool(local_proxy_variable), sync=bool(sync), staleness=int(staleness))


class PS(_PsFamily):
    """Every variable on the first CPU device."""

    name = "PS"


class PSLoadBalancing(_PsFamily):
    """Variables spread over the CPU devices greedily by bytes (AutoDist's default)."""

    name = "PSLoadBalancing"


class PartitionedPS(_PsFamily):
    """Variables split on axis 0 (its smallest divisor >= 2), shards spread greedily."""

    name = "PartitionedPS"


class UnevenPartitionedPS(_PsFamily):
    """As PartitionedPS with the smallest non-divisor: uneven shards."""

    name = "UnevenPartitionedPS"


class AllReduce(StrategyBuilder):
    """Every variable all-reduced, ``chunk_size`` variables per fusion group."""

    name = "AllReduce"

    def __init__(self, chunk_size: int = 128, all_reduce_spec: str = "NCCL", compressor: str = "NoneCompressor"):
        super().__init__(chunk_size=int(chunk_size), all_reduce_spec=str(all_reduce_spec), compressor=str(compressor))


class PartitionedAR(StrategyBuilder):
    """Variables split on axis 0 and their shards all-reduced in fusion groups."""

    name = "PartitionedAR"

    def __init__(self, chunk_size: int = 128):
        super().__init__(chunk_size=int(chunk_size))


class RandomAxisPartitionAR(StrategyBuilder):
    """Dense variables split on a seeded random axis, their shards all-reduced."""

    name = "RandomAxisPartitionAR"

    def __init__(self, chunk_size: int = 128, seed: int = 0):
        super().__init__(chunk_size=int(chunk_size), seed=int(seed))


class Parallax(StrategyBuilder):
    """Sparse variables on parameter servers, dense ones all-reduced."""

    name = "Parallax"

    def __init__(self, chunk_size: int = 128, sync: bool = True, staleness: int = 0):
        super().__init__(chunk_size=int(chunk_size), sync=bool(sync), staleness=int(staleness))
