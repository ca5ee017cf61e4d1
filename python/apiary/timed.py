"""DHT time and values with their expiration, as hivemind's."""
from dataclasses import dataclass
from typing import Any, Generic, Iterator, TypeVar

from . import _apiary

T = TypeVar("T")

DHTExpiration = float


def get_dht_time() -> DHTExpiration:
    """DHT time: seconds since the Unix epoch, as a float (the same clock on every peer)."""
    return _apiary.get_dht_time()


@dataclass(frozen=True)
class ValueWithExpiration(Generic[T]):
    """A value and when it expires; unpacks and indexes like the pair ``(value, expiration_time)``."""

    value: T
    expiration_time: DHTExpiration

    def __iter__(self) -> Iterator[Any]:
        return iter((self.value, self.expiration_time))

    def __getitem__(self, item: int) -> Any:
        return (self.value, self.expiration_time)[item]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ValueWithExpiration):
            return self.value == other.value and self.expiration_time == other.expiration_time
        if isinstance(other, tuple):
            return (self.value, self.expiration_time) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.expiration_time,))
