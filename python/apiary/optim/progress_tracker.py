"""apiary.optim.ProgressTracker: hivemind's ProgressTracker over apiary's C++ one.

Each peer publishes its LocalTrainingProgress as its own signed subkey of
``<prefix>_progress`` (every metadata_expiration / 2 and on each report) and reads every
peer's back when the swarm's ETA says; the global epoch, samples and ETA are computed as
hivemind computes them (core/optim/progress.hpp). It runs on its own C++ actor (no
Python thread); the node gets the run's validators (an Ed25519 ownership validator and
the progress schema) when the tracker starts.
"""
import contextlib
import dataclasses
import time
from typing import Any, Dict, Iterator, Optional

from .. import _apiary
from .._native import NativeRunner
from ..dht import DHT
from ..dht.crypto import Ed25519PrivateKey
from ..dht.schema import BytesWithPublicKey, confloat, conint


@dataclasses.dataclass(frozen=True)
class LocalTrainingProgress:
    """One peer's progress as it publishes it."""

    peer_id: bytes
    epoch: int
    samples_accumulated: int
    samples_per_second: float
    time: float
    client_mode: bool


@dataclasses.dataclass
class GlobalTrainingProgress:
    """The swarm's progress as this peer sees it."""

    epoch: int
    samples_accumulated: int
    target_batch_size: int
    num_peers: int
    num_clients: int
    eta_next_epoch: float
    next_fetch_time: float


class _LocalTrainingProgressSchema:
    """What the schema checks of a record, as hivemind's pydantic model declares it."""

    peer_id: bytes
    epoch: conint(ge=0)  # type: ignore[valid-type]
    samples_accumulated: conint(ge=0)  # type: ignore[valid-type]
    samples_per_second: confloat(ge=0)  # type: ignore[valid-type]
    time: float
    client_mode: bool


class TrainingProgressSchema:
    """The schema of the progress records (for apiary.dht.schema.SchemaValidator with
    prefix=<run id>); the tracker's node checks records with it already."""

    progress: Dict[BytesWithPublicKey, Optional[_LocalTrainingProgressSchema]]


class _FetchedThisEpoch:
    """hivemind's fetched_global_progress_this_epoch event, read from the tracker."""

    def __init__(self, tracker: "ProgressTracker"):
        self._tracker = tracker

    def is_set(self) -> bool:
        return self._tracker._look()["fetched_this_epoch"]

    def wait(self, timeout: Optional[float] = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True


class _Speed:
    def __init__(self, tracker: "ProgressTracker"):
        self._tracker = tracker

    @property
    def samples_per_second(self) -> float:
        return self._tracker._look()["local"]["samples_per_second"]


class ProgressTracker(NativeRunner):
    """Tracks the collaborative progress toward target_batch_size samples per epoch
    (hivemind.optim.progress_tracker.ProgressTracker; arguments and defaults are its)."""

    _what = "progress tracker"
    _start_with = "start()"

    def __init__(
        self,
        dht: DHT,
        prefix: str,
        target_batch_size: int,
        *,
        client_mode: Optional[bool] = None,
        min_refresh_period: float = 0.5,
        max_refresh_period: float = 10,
        default_refresh_period: float = 3,
        expected_drift_peers: float = 3,
        expected_drift_rate: float = 0.2,
        performance_ema_alpha: float = 0.1,
        metadata_expiration: float = 60.0,
        status_loglevel: Any = None,
        private_key: Optional[Ed25519PrivateKey] = None,
        daemon: bool = True,
        start: bool = True,
    ):
        if not isinstance(dht, DHT) or not dht.is_alive():
            raise ValueError("expected a running apiary.DHT")
        if not prefix:
            raise ValueError("expected a non-empty prefix (the run id)")
        if private_key is not None and not isinstance(private_key, Ed25519PrivateKey):
            raise TypeError(f"expected an apiary.dht.crypto.Ed25519PrivateKey, got {type(private_key).__name__}")
        self.dht, self.prefix = dht, prefix
        self.client_mode = dht.client_mode if client_mode is None else bool(client_mode)
        self.target_batch_size = int(target_batch_size)
        self.training_progress_key = f"{prefix}_progress"
        self.metadata_expiration = float(metadata_expiration)
        self._options = dict(
            target_batch_size=self.target_batch_size, client_mode=self.client_mode,
            min_refresh_period=float(min_refresh_period), max_refresh_period=float(max_refresh_period),
            default_refresh_period=float(default_refresh_period), expected_drift_peers=float(expected_drift_peers),
            expected_drift_rate=float(expected_drift_rate), performance_ema_alpha=float(performance_ema_alpha),
            metadata_expiration=self.metadata_expiration)
        key = private_key if private_key is not None else Ed25519PrivateKey.process_wide()
        self._seed = key.to_bytes()
        self._native: Any = None
        self._shut_down = False
        self.fetched_global_progress_this_epoch = _FetchedThisEpoch(self)
        if start:
            self.start()

    def start(self) -> None:
        """Starts publishing and reading progress (ValueError for bad settings)."""
        if self._native is not None:
            raise RuntimeError("expected a tracker that is not running, but it was started already")
        self._native = _apiary.ProgressTracker(self.dht._require(), self.prefix, self._options, self._seed)
        self.dht._users.add(self)

    def _look(self) -> Dict[str, Any]:
        return self._require().look()

    @staticmethod
    def _global_of(snapshot: Dict[str, Any]) -> GlobalTrainingProgress:
        return GlobalTrainingProgress(**snapshot["global"])

    @property
    def local_public_key(self) -> bytes:
        """The owner marker of this peer's record (its subkey)."""
        return self._require().owner_marker

    @property
    def global_progress(self) -> GlobalTrainingProgress:
        return self._global_of(self._look())

    @property
    def local_progress(self) -> LocalTrainingProgress:
        return LocalTrainingProgress(**self._look()["local"])

    @property
    def global_epoch(self) -> int:
        return self._look()["global"]["epoch"]

    @property
    def ready_to_update_epoch(self) -> bool:
        """The swarm is ahead of this peer, has target_batch_size samples, or its ETA passed."""
        return self._look()["ready_to_update_epoch"]

    @property
    def estimated_next_update_time(self) -> float:
        """DHT time the next epoch is due (now when ready)."""
        return self._look()["estimated_next_update_time"]

    def report_local_progress(self, local_epoch: int, samples_accumulated: int, update_global_samples: bool = True) -> None:
        """This peer has ``samples_accumulated`` samples toward ``local_epoch``; published at once."""
        self._require().report(int(local_epoch), int(samples_accumulated), bool(update_global_samples))

    def update_epoch(self, new_epoch: Optional[int] = None) -> int:
        """Moves to ``new_epoch`` (default: the local epoch + 1) with no samples; returns it."""
        return self._require().update_epoch(None if new_epoch is None else int(new_epoch))

    @contextlib.contextmanager
    def pause_updates(self) -> Iterator[None]:
        """Reports and fetches wait until the block ends, so the calls inside it are
        published as one (e.g. update_epoch after a report)."""
        native = self._require()
        native.pause(True)
        try:
            yield
        finally:
            if self._native is not None:
                native.pause(False)

    @property
    def performance_ema(self) -> "_Speed":
        """This peer's speed (hivemind's PerformanceEMA: ``.samples_per_second``)."""
        return _Speed(self)

    def fetch_global_progress(self, timeout: float = 30.0) -> GlobalTrainingProgress:
        """Reads every peer's record now (apiary's: hivemind's fetcher only runs on its schedule)."""
        return self._global_of(self._require().fetch(float(timeout)))

    def shutdown(self, timeout: Optional[float] = None) -> None:
        """Publishes that this peer left (None) and stops."""
        if self._native is not None and not self._shut_down:
            try:
                self._native.leave(5.0 if timeout is None else float(timeout))
            except (TimeoutError, RuntimeError):
                pass  # the node is going down: the record expires on its own
            self._native.stop()
            self._native = None
        self._shut_down = True

