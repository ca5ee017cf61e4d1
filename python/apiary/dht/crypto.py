"""Owner-protected records (hivemind.dht.crypto): a record whose key or subkey holds an
``[owner:<public key>]`` marker must carry that owner's ``[signature:<base64>]``, so only
the owner writes under it. RSASignatureValidator signs as hivemind's does (RSA-2048,
RSA-PSS SHA-256, OpenSSH public keys); Ed25519SignatureValidator signs with Ed25519 (a
shorter marker and faster signing). Each checks both kinds of owners' signatures.
"""
import threading
from typing import Dict, Optional

from .. import _apiary
from .validation import RecordValidatorBase


class _PickledAsInitArgument:
    """Pickles as the one argument its ``__init__`` takes, kept in ``self._<_STATE_KEY>``."""

    _STATE_KEY = ""

    def __getstate__(self) -> dict:
        return {self._STATE_KEY: getattr(self, "_" + self._STATE_KEY)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state[self._STATE_KEY])


class _PrivateKey(_PickledAsInitArgument):
    _KIND = ""
    _STATE_KEY = "bytes"
    _process_wide: Dict[str, "_PrivateKey"] = {}
    _lock = threading.Lock()

    def __init__(self, private_bytes: Optional[bytes] = None):
        """A fresh key, or the key of ``private_bytes`` (as given by to_bytes())."""
        self._bytes = _apiary.generate_private_key(self._KIND) if private_bytes is None else bytes(private_bytes)
        self._public = _apiary.public_key_text(self._KIND, self._bytes)  # ValueError when malformed

    @classmethod
    def process_wide(cls) -> "_PrivateKey":
        """One key per process and kind (what validators made without a key use)."""
        with cls._lock:
            if cls._KIND not in cls._process_wide:
                cls._process_wide[cls._KIND] = cls()
            return cls._process_wide[cls._KIND]

    def to_bytes(self) -> bytes:
        """The private key's bytes (secret)."""
        return self._bytes

    @classmethod
    def from_bytes(cls, data: bytes) -> "_PrivateKey":
        return cls(data)

    def public_key_bytes(self) -> bytes:
        """The public key as an owner marker names it."""
        return self._public


class RSAPrivateKey(_PrivateKey):
    """An RSA-2048 key (DER bytes); its public key is OpenSSH text ``ssh-rsa AAAA...``."""

    _KIND = "rsa"


class Ed25519PrivateKey(_PrivateKey):
    """An Ed25519 key (its 32-byte seed); owner markers hold base64 of the raw public key."""

    _KIND = "ed25519"


class _SignatureValidator(_PickledAsInitArgument, RecordValidatorBase):
    PUBLIC_KEY_FORMAT = b"[owner:_key_]"
    SIGNATURE_FORMAT = b"[signature:_value_]"
    _KEY_CLASS = _PrivateKey
    _STATE_KEY = "private_key"

    def __init__(self, private_key: Optional[_PrivateKey] = None):
        if private_key is None:
            private_key = self._KEY_CLASS.process_wide()
        if not isinstance(private_key, self._KEY_CLASS):
            raise TypeError(f"expected a {self._KEY_CLASS.__name__}, got {type(private_key).__name__}")
        self._private_key = private_key
        self._native, self._local_public_key = _apiary.ownership_validator(private_key._KIND, private_key.to_bytes())

    @property
    def local_public_key(self) -> bytes:
        """This validator's owner marker: put it in a subkey to own that entry."""
        return self._local_public_key


class RSASignatureValidator(_SignatureValidator):
    """hivemind's RSASignatureValidator: signs records naming its RSA key (priority 10)."""

    _KEY_CLASS = RSAPrivateKey


class Ed25519SignatureValidator(_SignatureValidator):
    """Like RSASignatureValidator, with an Ed25519 key (priority 10)."""

    _KEY_CLASS = Ed25519PrivateKey
