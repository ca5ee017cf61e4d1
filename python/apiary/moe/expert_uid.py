"""Expert uids (hivemind's ``moe/expert_uid.py``): ``prefix.c1.c2...`` with numeric
coordinates, prefixes ending in the delimiter, and ``ExpertInfo`` (a uid and the server
that serves it)."""
import re
from typing import NamedTuple, Tuple

UID_DELIMITER = "."
FLAT_EXPERT = -1
UID_PATTERN = re.compile("^(([^.])+)([.](?:[0]|([1-9]([0-9]*))))+$")
PREFIX_PATTERN = re.compile("^(([^.])+)([.](?:[0]|([1-9]([0-9]*))))*[.]$")


class ExpertInfo(NamedTuple):
    """An expert and its server: ``address`` is the server's multiaddr with
    ``/p2p/<PeerID>`` (apiary declares it so that a client can dial it directly)."""

    uid: str
    address: str

    @property
    def peer_id(self) -> str:
        """The base58 PeerID of the server (the last part of its address)."""
        return self.address.rsplit("/p2p/", 1)[-1]


def is_valid_uid(maybe_uid: str) -> bool:
    """True for ``prefix.c1[.c2...]``: a prefix without dots, then numeric coordinates
    without leading zeros."""
    return bool(UID_PATTERN.fullmatch(maybe_uid))


def is_valid_prefix(maybe_prefix: str) -> bool:
    """True for a uid's prefix ending in the delimiter: ``ffn.``, ``ffn.3.``."""
    return bool(PREFIX_PATTERN.fullmatch(maybe_prefix))


def split_uid(uid_or_prefix: str) -> Tuple[str, int]:
    """(``prefix.``, last coordinate) of a uid or prefix."""
    if uid_or_prefix.endswith(UID_DELIMITER):
        uid_or_prefix = uid_or_prefix[:-1]
    prefix, coord = uid_or_prefix.rsplit(UID_DELIMITER, 1)
    return prefix + UID_DELIMITER, int(coord)
