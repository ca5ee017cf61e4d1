"""msgpack as hivemind writes it (hivemind.utils.serializer.MSGPackSerializer).

Tuples are ext type 0x40 (a msgpack array of their items, with the same hooks), so a
tuple and a list stay distinct; bytes are bin, str is str, floats are float64.
``strict_types`` is on: subclasses of int/float/str (numpy scalars, for one) are not
converted silently, they raise ``TypeError``.
"""
from typing import Any

import msgpack

_TUPLE_EXT = 0x40
_DICTIONARY_EXT = 0x50


class MSGPackSerializer:
    """Serializes DHT keys, subkeys and values, gathers and metadata."""

    @classmethod
    def _encode(cls, obj: Any) -> Any:
        if isinstance(obj, tuple):
            return msgpack.ExtType(_TUPLE_EXT, cls.dumps(list(obj)))
        raise TypeError(f"expected a msgpack-serializable object, got {type(obj).__name__}: {obj!r}")

    @classmethod
    def _decode(cls, code: int, data: bytes) -> Any:
        if code == _TUPLE_EXT:
            return tuple(cls.loads(data))
        return data  # an ext type apiary does not know: its raw bytes, as hivemind does

    @classmethod
    def dumps(cls, obj: Any) -> bytes:
        """The msgpack bytes of ``obj`` (TypeError when it cannot be serialized)."""
        return msgpack.dumps(obj, use_bin_type=True, strict_types=True, default=cls._encode)

    @classmethod
    def loads(cls, buf: bytes) -> Any:
        """The object of msgpack bytes ``buf``."""
        return msgpack.loads(buf, ext_hook=cls._decode, raw=False, strict_map_key=False)
