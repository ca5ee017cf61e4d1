"""PeerID: a libp2p peer id (multihash of the peer's public key), as hivemind's."""
from typing import Union

from . import _apiary


class PeerID:
    """A peer's id; compares and hashes by its bytes, prints as base58."""

    __slots__ = ("_bytes", "_b58")

    def __init__(self, peer_id_bytes: bytes):
        raw = bytes(peer_id_bytes)
        self._b58 = _apiary.peer_id_to_base58(raw)  # ValueError when not a PeerID
        self._bytes = raw

    @classmethod
    def from_base58(cls, text: str) -> "PeerID":
        """The PeerID written ``text`` (e.g. ``12D3KooW...``)."""
        return cls(_apiary.peer_id_from_base58(text))

    @classmethod
    def from_multiaddr(cls, maddr: str) -> "PeerID":
        """The PeerID a multiaddr names after ``/p2p/``."""
        text = str(maddr)
        marker = "/p2p/"
        if marker not in text:
            raise ValueError(f"expected a multiaddr with /p2p/<PeerID>, got {text!r}")
        return cls.from_base58(text.rsplit(marker, 1)[1].split("/", 1)[0])

    def to_bytes(self) -> bytes:
        return self._bytes

    def to_base58(self) -> str:
        return self._b58

    def to_string(self) -> str:
        return self._b58

    def __str__(self) -> str:
        return self._b58

    def __repr__(self) -> str:
        return f"<libp2p.peer.id.ID ({self._b58})>"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PeerID):
            return self._bytes == other._bytes
        if isinstance(other, (bytes, bytearray)):
            return self._bytes == bytes(other)
        return NotImplemented

    def __lt__(self, other: "PeerID") -> bool:
        return self._bytes < other._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)


PeerIDLike = Union[PeerID, bytes]
