"""apiary.DecentralizedAverager: hivemind's averager over apiary's C++ averager.

The averaged tensors are the trainer's own memory (float32, contiguous, on the CPU:
``torch.Tensor`` or ``numpy.ndarray``; or CUDA tensors of one GPU in a CUDA build,
reduced by that GPU's device actor): each step reads them and adds
``averaging_alpha * (group average - tensor)`` to them in place; nothing is copied into
shared memory or another process.
"""
import contextlib
import logging
import threading
import weakref
from enum import Enum
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from . import _apiary
from ._native import NativeRunner
from .compression import _DTYPES as _TORCH_DTYPES
from .compression import CompressionBase, CompressionInfo, NoCompression, TensorDescriptor, serialize_torch_tensor
from .dht import DHT
from .futures import OperationFuture
from .peer_id import PeerID
from .serializer import MSGPackSerializer
from .timed import get_dht_time

GatheredData = Any
logger = logging.getLogger(__name__)

# A step without a timeout looks for a group this long (hivemind: forever).
_NO_TIMEOUT = 7 * 24 * 3600.0


class AveragingMode(Enum):
    NODE = 0
    CLIENT = 1
    AUX = 2


def _memory_of(tensor: Any) -> Tuple[int, int, int]:
    """(address, elements, CUDA device or -1) of a float32, contiguous tensor or array;
    ValueError otherwise."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of the package
        torch = None
    if torch is not None and isinstance(tensor, torch.Tensor):
        if tensor.device.type not in ("cpu", "cuda"):
            raise ValueError(f"expected CPU or CUDA tensors, got one on {tensor.device}")
        if tensor.dtype != torch.float32:
            raise ValueError(f"expected floating-point tensors (float32, or float16 / bfloat16 / float64 on the "
                             f"CPU through a float32 copy), got {tensor.dtype}")
        if not tensor.is_contiguous():
            raise ValueError("expected contiguous tensors, got a strided view; pass tensor.contiguous()")
        device = -1 if tensor.device.type == "cpu" else (tensor.device.index or 0)
        return tensor.data_ptr(), tensor.numel(), device
    import numpy as np

    if isinstance(tensor, np.ndarray):
        if tensor.dtype != np.float32:
            raise ValueError(f"expected float32, float16 or float64 arrays, got {tensor.dtype}")
        if not tensor.flags["C_CONTIGUOUS"] or not tensor.flags["WRITEABLE"]:
            raise ValueError("expected C-contiguous, writeable arrays")
        return tensor.ctypes.data, tensor.size, -1
    raise TypeError(f"expected torch.Tensor or numpy.ndarray tensors, got {type(tensor).__name__}")


def _staging_of(tensor: Any) -> Any:
    """A float32 copy to average in place of a float16 / bfloat16 / float64 CPU tensor or
    array (None for one that is averaged in its own memory)."""
    import numpy as np
    import torch

    if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.dtype != torch.float32:
        if tensor.device.type != "cpu":
            raise ValueError(f"expected float32 tensors on {tensor.device}, got {tensor.dtype}; "
                             "other float dtypes are averaged through a float32 copy on the CPU only")
        return torch.empty(tuple(tensor.shape), dtype=torch.float32)
    if isinstance(tensor, np.ndarray) and tensor.dtype in (np.float16, np.float64):
        return np.empty(tensor.shape, dtype=np.float32)
    return None


def _device_of(memory: Sequence[Tuple[int, int, int]]) -> int:
    """The one device of every tensor (-1: host memory); ValueError for a mix."""
    devices = sorted({device for _, _, device in memory})
    if len(devices) > 1:
        names = ["cpu" if d < 0 else f"cuda:{d}" for d in devices]
        raise ValueError(f"expected every averaged tensor on one device, got tensors on {names}")
    return devices[0]


_UNSET = object()
_STATE_LOCK_PATIENCE = 30.0  # seconds the state provider waits for the tensors' lock


def _state_provider(averager: "DecentralizedAverager") -> Any:
    """What the C++ averager calls when a peer downloads the state: holds the averager
    weakly (the C++ side must not keep it alive)."""
    ref = weakref.ref(averager)

    def provide() -> Tuple[bytes, List[bytes]]:
        me = ref()
        if me is None:
            raise RuntimeError("the averager is gone")
        return me._state_for_peer()

    return provide


def _as_torch(tensor: Any) -> Any:
    import numpy as np
    import torch

    if isinstance(tensor, np.ndarray):
        return torch.from_numpy(tensor)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected torch.Tensor or numpy.ndarray state tensors, got {type(tensor).__name__}")
    return tensor


def _peer_of(maddr: str) -> PeerID:
    return PeerID.from_multiaddr(maddr)


class StepControl:
    """A running step (``step(wait=False)``): result(), trigger it, cancel it, change its weight."""

    def __init__(self, averager: "DecentralizedAverager", pending: Any, weight: float, require_trigger: bool):
        self._averager = averager
        self._future = OperationFuture(pending, averager._gathered_of)
        self._weight = weight
        self._triggered = not require_trigger

    def result(self, timeout: Optional[float] = None) -> Dict[PeerID, GatheredData]:
        """The gathered data of every group member, by PeerID (raises the step's error)."""
        return self._future.result(timeout)

    def done(self) -> bool:
        return self._future.done()

    def cancelled(self) -> bool:
        if self._future.cancelled():
            return True
        if not self._future.done():
            return False
        import concurrent.futures

        return isinstance(self._future.exception(0), concurrent.futures.CancelledError)

    def cancel(self) -> bool:
        """Abandons the step: it ends with CancelledError. False if it finished already."""
        if self._future.done():
            return False
        self._averager._native.cancel()
        return True

    def allow_allreduce(self) -> None:
        """Lets a ``require_trigger`` step begin its all-reduce (harmless when repeated)."""
        self._triggered = True
        with self._averager._lock:
            self._averager._refresh_staging()  # the values of trigger time
            self._averager._native.trigger()

    trigger = allow_allreduce

    @property
    def triggered(self) -> bool:
        return self._triggered

    @property
    def weight(self) -> float:
        return self._weight

    @weight.setter
    def weight(self, weight: float) -> None:
        if not self._averager._native.set_weight(float(weight)):
            raise RuntimeError("expected a step that has not begun its all-reduce, but it began (or ended)")
        self._weight = float(weight)


class DecentralizedAverager(NativeRunner):
    """Averages tensors with peers found through the DHT (hivemind.averaging.DecentralizedAverager).

    Arguments follow hivemind's; apiary differences: float32 tensors must be contiguous,
    all in host memory or all on one GPU (a CUDA build averages those through that GPU's
    device actor), and are averaged in place; float16, bfloat16 and float64 CPU tensors
    are averaged through a float32 copy, written back when the step's result is taken. ``allow_retries`` is always on
    (a step retries matchmaking until its timeout). ``identical_results=True`` (apiary's;
    every peer of the swarm must set it, with averaging_alpha 1) makes every member of a
    group end a round with the same bits, compressed codecs included.
    """

    _what = "averager"
    # (rank, [(rows, cols) per tensor], seed) to average by PowerSGD (set by
    # apiary.optim.PowerSGDGradientAverager before it starts the averager).
    _powersgd: Optional[Tuple[int, List[Tuple[int, int]], int]] = None

    def __init__(
        self,
        averaged_tensors: Sequence[Any],
        dht: DHT,
        *,
        start: bool,
        prefix: str,
        target_group_size: Optional[int] = None,
        min_group_size: int = 2,
        initial_group_bits: str = "",
        min_matchmaking_time: float = 5.0,
        request_timeout: float = 3.0,
        averaging_alpha: float = 1.0,
        part_size_bytes: int = 2**19,
        allreduce_timeout: Optional[float] = None,
        next_chunk_timeout: Optional[float] = None,
        sender_timeout: Optional[float] = None,
        reducer_timeout: Optional[float] = None,
        compression: CompressionBase = NoCompression(),
        state_compression: CompressionBase = NoCompression(),
        tensor_infos: Optional[Sequence[Any]] = None,
        bandwidth: Optional[float] = None,
        min_vector_size: int = 0,
        auxiliary: bool = False,
        allow_state_sharing: Optional[bool] = None,
        declare_state_period: float = 30,
        client_mode: Optional[bool] = None,
        daemon: bool = True,
        shutdown_timeout: float = 5,
        state_sharing_priority: float = 0.0,
        identical_results: bool = False,
    ):
        if not isinstance(dht, DHT) or not dht.is_alive():
            raise ValueError("expected a running apiary.DHT")
        if not prefix:
            raise ValueError("expected a non-empty prefix")
        client_mode = dht.client_mode if client_mode is None else bool(client_mode)
        if auxiliary and client_mode:
            raise ValueError("an auxiliary averager cannot be in client mode")
        self.mode = AveragingMode.CLIENT if client_mode else AveragingMode.AUX if auxiliary else AveragingMode.NODE
        self.client_mode = client_mode
        self.prefix = prefix
        self.dht = dht
        self._tensors = list(averaged_tensors)
        # float16 / bfloat16 / float64 tensors are averaged in a float32 copy: refreshed
        # from them before a step and its trigger, written back when its result is taken.
        self._staging = [_staging_of(t) for t in self._tensors]
        memory = [_memory_of(t if staged is None else staged) for t, staged in zip(self._tensors, self._staging)]
        if not memory:
            raise ValueError("expected at least one tensor to average")
        device = _device_of(memory)  # CUDA tensors average through the GPU's device actor
        if not isinstance(compression, CompressionBase):
            raise TypeError(f"expected an apiary.compression codec, got {type(compression).__name__}")
        if tensor_infos is None:
            infos = [CompressionInfo(i, TensorDescriptor(tuple(t.shape))) for i, t in enumerate(self._tensors)]
        else:
            infos = list(tensor_infos)
            if len(infos) != len(self._tensors):
                raise ValueError(f"expected one tensor_info per tensor ({len(self._tensors)}), got {len(infos)}")
        codecs = [int(compression.choose(info).compression_type) for info in infos]
        if not isinstance(state_compression, CompressionBase):
            raise TypeError(f"expected an apiary.compression codec, got {type(state_compression).__name__}")
        self.compression, self.state_compression = compression, state_compression
        self.tensor_infos = infos
        sender = sender_timeout if sender_timeout is not None else next_chunk_timeout
        sender = 5.0 if sender is None else float(sender)
        reducer = 2 * sender if reducer_timeout is None else float(reducer_timeout)
        if allow_state_sharing is None:
            allow_state_sharing = self.mode == AveragingMode.NODE
        self._allow_state_sharing = bool(allow_state_sharing)
        self.min_matchmaking_time = float(min_matchmaking_time)
        self.allreduce_timeout = allreduce_timeout
        options = dict(
            prefix=prefix,
            mode=self.mode.value,
            target_group_size=0 if target_group_size is None else int(target_group_size),
            min_group_size=int(min_group_size),
            initial_group_bits=str(initial_group_bits),
            min_matchmaking_time=self.min_matchmaking_time,
            request_timeout=float(request_timeout),
            averaging_alpha=float(averaging_alpha),
            identical_results=bool(identical_results),
            bandwidth=None if bandwidth is None else float(bandwidth),
            codecs=codecs,
            part_size_bytes=int(part_size_bytes),
            min_vector_size=int(min_vector_size),
            sender_timeout=sender,
            reducer_timeout=reducer,
            state_sharing_priority=float(state_sharing_priority) if self._allow_state_sharing else None,
            declare_state_period=float(declare_state_period),
            state_codecs=[],
            gpu=device,
            current_state=_state_provider(self) if self._allow_state_sharing else None,
            powersgd=self._powersgd,
        )
        self._lock = threading.RLock()
        self._native: Any = None
        self._options = options
        self._memory = [(address, size) for address, size, _ in memory]
        self._shut_down = False
        self._state_metadata: Any = _UNSET
        self._state_sharing_priority = float(state_sharing_priority)
        if start:
            self.run_in_background()

    def run_in_background(self, await_ready: bool = True, timeout: Optional[float] = None) -> None:
        """Starts the averager: it serves its groupmates from now on."""
        if self._native is not None:
            raise RuntimeError("expected an averager that is not running, but it was started already")
        if self._allow_state_sharing:
            self._options["state_sharing_priority"] = self._state_sharing_priority
        self._native = _apiary.Averager(self.dht._require(), self._memory, self._options)
        self.dht._users.add(self)

    @property
    def peer_id(self) -> PeerID:
        return self.dht.peer_id

    @property
    def allow_state_sharing(self) -> bool:
        return self._allow_state_sharing

    @property
    def state_sharing_priority(self) -> float:
        """This peer's priority as a donor: peers loading a state ask the highest first."""
        return self._state_sharing_priority

    @state_sharing_priority.setter
    def state_sharing_priority(self, priority: float) -> None:
        """Declared in the DHT at once (an averager that does not share its state keeps
        the value for when it is asked, and declares nothing)."""
        priority = float(priority)
        if priority != priority:
            raise ValueError("expected a number as the state sharing priority, got NaN")
        if self._allow_state_sharing and self._native is not None and priority != self._state_sharing_priority:
            self._require().set_state_sharing_priority(priority)
        self._state_sharing_priority = priority

    def _refresh_staging(self) -> None:
        import numpy as np

        for tensor, staged in zip(self._tensors, self._staging):
            if staged is None:
                continue
            if isinstance(staged, np.ndarray):
                np.copyto(staged, tensor, casting="same_kind")
            else:
                staged.copy_(tensor.detach())

    def _apply_staging(self) -> None:
        import numpy as np
        import torch

        for tensor, staged in zip(self._tensors, self._staging):
            if staged is None:
                continue
            if isinstance(staged, np.ndarray):
                np.copyto(tensor, staged, casting="same_kind")
            else:
                with torch.no_grad():
                    tensor.copy_(staged)

    def _gathered_of(self, report: Dict[str, Any]) -> Dict[PeerID, GatheredData]:
        if any(staged is not None for staged in self._staging):
            with self._lock:
                self._apply_staging()
        out: Dict[PeerID, GatheredData] = {}
        for maddr, gathered in zip(report["peers"], report["gathered"]):
            out[_peer_of(maddr)] = MSGPackSerializer.loads(gathered) if gathered else None
        self.last_report = report
        return out

    def step(
        self,
        gather: Optional[GatheredData] = None,
        scheduled_time: Optional[float] = None,
        weight: Optional[float] = None,
        timeout: Optional[float] = None,
        allow_retries: bool = True,
        require_trigger: bool = False,
        wait: bool = True,
    ) -> Any:
        """Finds a group and averages the tensors with it, in place.

        :param gather: any msgpack-serializable data sent to the groupmates (their
          gathers come back, by PeerID)
        :param scheduled_time: when the all-reduce should begin (DHT time; default: now
          + min_matchmaking_time)
        :param weight: this peer's weight in the average (default 1; 0 for an auxiliary peer)
        :param timeout: seconds to find a group before giving up (default: no limit)
        :param require_trigger: wait for StepControl.allow_allreduce() before averaging
        :param wait: return the gathered data (True) or a StepControl (False)
        """
        native = self._require()
        if weight is None:
            weight = 0.0 if self.mode == AveragingMode.AUX else 1.0
        now = get_dht_time()
        if scheduled_time is None:
            scheduled_time = now + self.min_matchmaking_time
        scheduled_in = max(0.0, float(scheduled_time) - now)
        if timeout is None:
            timeout = _NO_TIMEOUT
        gather_bytes = MSGPackSerializer.dumps(gather)
        with self._lock:
            self._refresh_staging()
            pending = native.step(float(weight), float(timeout), scheduled_in, gather_bytes, bool(require_trigger))
        control = StepControl(self, pending, float(weight), require_trigger)
        return control.result() if wait else control

    @contextlib.contextmanager
    def get_tensors(self) -> Iterator[List[Any]]:
        """The averaged tensors (the trainer's own), under the averager's lock."""
        with self._lock:
            yield self._tensors

    def get_current_state(self) -> Tuple[Any, Sequence[Any], Sequence[CompressionInfo]]:
        """What a peer downloading this peer's state gets: ``(metadata, tensors, infos)``
        (override it to share more, e.g. optimizer statistics). Called on the averager's
        thread when a peer asks; the tensors are encoded with ``state_compression`` by
        their infos. Default: the averaged tensors, and the metadata of
        set_state_metadata or ``dict(group_key=...)``."""
        with self.get_tensors() as tensors:
            metadata = self._state_metadata if self._state_metadata is not _UNSET else dict(group_key=self.get_group_bits())
            return metadata, list(tensors), self.tensor_infos

    def _state_for_peer(self) -> Tuple[bytes, List[bytes]]:
        # On the averager's thread: a trainer holding the tensors' lock must not stall it.
        if not self._lock.acquire(timeout=_STATE_LOCK_PATIENCE):
            raise TimeoutError(f"the averaged tensors stayed locked for {_STATE_LOCK_PATIENCE} s; "
                               "the state is not shared this time")
        try:
            metadata, tensors, infos = self.get_current_state()
            tensors = [_as_torch(t) for t in tensors]
            if infos is None:
                infos = [CompressionInfo.from_tensor(t, key=i) for i, t in enumerate(tensors)]
            if len(infos) != len(tensors):
                raise ValueError(f"get_current_state gave {len(tensors)} tensors but {len(infos)} infos")
            encoded = [serialize_torch_tensor(t, self.state_compression, info).SerializeToString()
                       for t, info in zip(tensors, infos)]
            return MSGPackSerializer.dumps(metadata), encoded
        finally:
            self._lock.release()

    def load_state_from_peers(
        self, wait: bool = True, timeout: Optional[float] = None
    ) -> Optional[Tuple[Any, List[Any]]]:
        """Downloads the state of the best donor: ``(metadata, tensors)`` as its
        get_current_state gave them (dtypes and shapes included), or None when no peer
        shares its state. The averaged tensors are not changed."""
        native = self._require()
        pending = native.load_state_from_peers(60.0 if timeout is None else float(timeout), True)
        future = OperationFuture(pending, self._state_of)
        if not wait:
            return future
        try:
            return future.result()
        except (LookupError, ConnectionError) as e:  # no donor, or every donor failed: hivemind's None
            logger.warning(f"load_state_from_peers: no state loaded: {e}")
            return None

    def _state_of(self, loaded: Tuple[bytes, str, list]) -> Tuple[Any, List[Any]]:
        metadata, _donor, decoded = loaded
        import torch

        tensors = [torch.from_numpy(values).view(_TORCH_DTYPES[dtype]).reshape(tuple(shape))
                   for values, dtype, shape in decoded]
        return (MSGPackSerializer.loads(metadata) if metadata else None), tensors

    def set_state_metadata(self, metadata: Any) -> None:
        """What peers downloading this peer's state get as metadata (msgpack-serializable)
        from the default get_current_state."""
        MSGPackSerializer.dumps(metadata)  # TypeError now rather than when a peer asks
        self._state_metadata = metadata

    def get_group_bits(self) -> str:
        key = self._require().group_key()
        return key.rsplit(".", 1)[1] if "." in key else ""

    def shutdown(self) -> None:
        """Stops the averager (a running step ends cancelled)."""
        if self._native is not None and not self._shut_down:
            self._native.stop()  # even while a traceback still holds the object
            self._native = None
        self._shut_down = True

