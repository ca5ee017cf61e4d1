"""apiary.DHT: hivemind's DHT facade over apiary's C++ Kademlia node.

Keys, subkeys and values are any msgpack-serializable Python objects, serialized as
hivemind does (apiary.serializer), so records are the bytes hivemind stores. The node
runs in this process on its own threads (no child process); calls release the GIL.
"""
import atexit
import threading
import warnings
import weakref
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from .. import _apiary
from .._native import NativeRunner
from ..futures import OperationFuture
from ..peer_id import PeerID
from ..serializer import MSGPackSerializer
from ..timed import DHTExpiration, ValueWithExpiration, get_dht_time
from . import crypto, schema, validation
from .validation import CompositeValidator, DHTRecord, RecordValidatorBase, native_validators

DHTKey = Any
Subkey = Any
DHTValue = Any

_DEFAULT_HOST_MAADDRS = ("/ip4/127.0.0.1/tcp/0",)

# Every running DHT of the process: at exit each is shut down (its averagers first) while
# the interpreter is still whole, instead of by the garbage collector during teardown.
_RUNNING: "weakref.WeakSet[DHT]" = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for dht in list(_RUNNING):
        dht.shutdown()


def _found_to_python(found: Any) -> Optional[ValueWithExpiration]:
    if found is None:
        return None
    value, expiration = found
    if isinstance(value, dict):
        entries = {
            MSGPackSerializer.loads(subkey): ValueWithExpiration(MSGPackSerializer.loads(v), exp)
            for subkey, (v, exp) in value.items()
        }
        return ValueWithExpiration(entries, expiration)
    return ValueWithExpiration(MSGPackSerializer.loads(value), expiration)


class DHT(NativeRunner):
    """A DHT node (hivemind.DHT's API).

    :param initial_peers: multiaddrs (with /p2p/<PeerID>) of peers to bootstrap from;
      none: this node starts a new DHT
    :param start: start the node now (else call run_in_background())
    :param client_mode: the node makes requests but serves none (peers do not store on it)
    :param host_maddrs: where to listen; the first multiaddr is used (default
      ``/ip4/127.0.0.1/tcp/0``: loopback, a free port)
    :param identity_path: a file with the node's Ed25519 key (created when missing), so
      its PeerID survives restarts
    :param record_validators: apiary.dht validators (crypto.RSASignatureValidator,
      crypto.Ed25519SignatureValidator, schema.SchemaValidator): the node checks, signs and
      strips records with them, in C++
    :param num_workers: threads of the node's runtime (0: as many as the machine's cores, at most 4)
    :param insecure: plaintext connections (a trusted cluster, or shared memory on one host),
      which every peer must choose too; by default connections are encrypted and PeerIDs
      proven (Noise XX), as libp2p's are in hivemind
    :param authority_path: a swarm authority's Ed25519 key file (``apiary identity create``)
      that the swarm's members share: every call of this node, and of averagers and
      optimizers over it, is then authorized (each member mints its own access tokens with
      it); calls from others are refused, and their answers not believed (hivemind's
      ``authorizer=``, on every service rather than only the DHT's)
    :param use_auto_relay: as hivemind's: when the initial peers cannot call this node back
      (it is behind NAT or a firewall), reserve a slot at the first of them that serves as a
      relay and be reached through it; get_visible_maddrs() then names the relayed address
      (``.../p2p/RELAY/p2p-circuit/p2p/SELF``)
    :param relay_service: serve as a relay for peers behind NAT (they reserve a slot here
      and are dialled through this node); DHTs of one process that share a listen address
      must agree on it
    :param use_relay: accepted for hivemind's sake: apiary always dials relayed addresses
      through their relay
    """

    _what = "DHT"

    def __init__(
        self,
        initial_peers: Optional[Sequence[str]] = None,
        *,
        start: bool = True,
        daemon: bool = True,
        num_workers: int = 0,
        record_validators: Iterable[Any] = (),
        shutdown_timeout: float = 3,
        await_ready: bool = True,
        client_mode: bool = False,
        host_maddrs: Optional[Sequence[str]] = None,
        identity_path: Optional[str] = None,
        insecure: bool = False,
        authority_path: Optional[str] = None,
        use_auto_relay: bool = False,
        relay_service: bool = False,
        use_relay: bool = True,
        **kwargs: Any,
    ):
        if isinstance(initial_peers, str):
            raise TypeError("expected initial_peers as a list of multiaddrs, got one str; wrap it in a list")
        self.initial_peers: List[str] = [str(p) for p in (initial_peers or [])]
        self.client_mode = bool(client_mode)
        self.num_workers = int(num_workers)
        self.shutdown_timeout = shutdown_timeout
        self._validators = native_validators(record_validators)  # TypeError on a foreign validator
        maddrs = [str(m) for m in (host_maddrs or _DEFAULT_HOST_MAADDRS)]
        if len(maddrs) > 1:
            warnings.warn(f"apiary.DHT listens on one multiaddr; using {maddrs[0]}, ignoring {maddrs[1:]}")
        self._listen = maddrs[0]
        self._identity_path = "" if identity_path is None else str(identity_path)
        self.insecure = bool(insecure)
        self._authority_path = "" if authority_path is None else str(authority_path)
        self.use_auto_relay = bool(use_auto_relay)
        self.relay_service = bool(relay_service)
        del use_relay
        if kwargs:
            warnings.warn(f"apiary.DHT ignores these hivemind options: {sorted(kwargs)}")
        self._native: Optional[Any] = None
        self._shut_down = False
        self._lock = threading.Lock()  # calls from any thread, shutdown() among them
        self._users: "weakref.WeakSet[Any]" = weakref.WeakSet()  # averagers over this node
        if start:
            self.run_in_background(await_ready=await_ready)

    def run_in_background(self, await_ready: bool = True, timeout: Optional[float] = None) -> None:
        """Starts the node (bootstrapping from initial_peers) and returns once it is up."""
        if self._native is not None:
            raise RuntimeError("expected a DHT that is not running, but this one was started already")
        if self._shut_down:
            raise RuntimeError("expected a DHT that was not shut down; create a new one")
        self._native = _apiary.Dht(self._listen, self.initial_peers, self.client_mode, self._identity_path,
                                 self.num_workers, self._validators, self.insecure, self._authority_path,
                                 self.relay_service, self.use_auto_relay)
        _RUNNING.add(self)

    def add_validators(self, record_validators: Iterable[RecordValidatorBase]) -> None:
        """Adds record validators to the running node (merged into its own where they
        merge: ownership validators into one, schemas into one accepting any schema)."""
        natives = native_validators(record_validators)
        with self._lock:
            self._require().add_validators(natives)

    def wait_until_ready(self, timeout: Optional[float] = None) -> None:
        """Returns once the node runs (start() returns only then, so at once)."""
        self._require()

    @property
    def peer_id(self) -> PeerID:
        return PeerID(self._require().peer_id)

    def get_visible_maddrs(self, latest: bool = False) -> List[str]:
        """Multiaddrs with /p2p/<PeerID> other peers can reach this node at."""
        return list(self._require().visible_addrs())

    def store(
        self,
        key: DHTKey,
        value: DHTValue,
        expiration_time: DHTExpiration,
        subkey: Optional[Subkey] = None,
        return_future: bool = False,
        **kwargs: Any,
    ) -> Union[bool, OperationFuture]:
        """Stores ``value`` under ``key`` (an entry ``subkey`` of a dictionary value, if
        given) until ``expiration_time`` (DHT time); True if at least one peer accepted it."""
        packed_subkey = None if subkey is None else MSGPackSerializer.dumps(subkey)
        packed_key, packed_value = MSGPackSerializer.dumps(key), MSGPackSerializer.dumps(value)
        with self._lock:
            pending = self._require().store(packed_key, packed_value, float(expiration_time), packed_subkey)
        future = OperationFuture(pending)
        return future if return_future else future.result()

    def get(
        self, key: DHTKey, latest: bool = False, return_future: bool = False, **kwargs: Any
    ) -> Union[Optional[ValueWithExpiration], OperationFuture]:
        """The value of ``key`` with its expiration, or None; ``latest``: ask until the
        freshest value is known. A dictionary value comes as ``{subkey: ValueWithExpiration}``."""
        packed_key = MSGPackSerializer.dumps(key)
        with self._lock:
            pending = self._require().get(packed_key, bool(latest))
        future = OperationFuture(pending, _found_to_python)
        return future if return_future else future.result()

    def shutdown(self) -> None:
        """Stops the node (idempotent)."""
        for user in list(self._users):
            user.shutdown()  # an averager stops before the node it uses
        with self._lock:
            if self._native is not None and not self._shut_down:
                self._native.stop()
            self._shut_down = True

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:  # noqa: BLE001 - the interpreter may be going down
            pass
