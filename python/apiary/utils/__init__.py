"""hivemind.utils' names that apiary has, so ``from hivemind.utils import get_dht_time``
style imports work with ``import apiary as hivemind``."""
from ..futures import OperationFuture as MPFuture
from ..serializer import MSGPackSerializer
from ..timed import DHTExpiration, ValueWithExpiration, get_dht_time

__all__ = ["MPFuture", "MSGPackSerializer", "DHTExpiration", "ValueWithExpiration", "get_dht_time"]
