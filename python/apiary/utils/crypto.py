"""hivemind.utils.crypto's key classes (defined in apiary.dht.crypto)."""
from ..dht.crypto import Ed25519PrivateKey, RSAPrivateKey

__all__ = ["RSAPrivateKey", "Ed25519PrivateKey"]
