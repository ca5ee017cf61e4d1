"""Server (hivemind's ``moe/server/server.py``): experts served by apiary's C++ server
(task pools, batching, the RPCs, declarations in the DHT every ``update_period``), their
compute in the torch modules of ``ModuleBackend``s; checkpoints of every expert to a
folder at an interval, loaded on start."""
import logging
import os
import threading
from typing import Any, Dict, Optional, Sequence

import torch

from .. import _apiary
from .._native import NativeRunner
from ..dht import DHT
from .checkpoints import load_experts, store_experts
from .layers import name_to_block, name_to_input
from .module_backend import ModuleBackend, _Served
from .schema import BatchTensorDescriptor

logger = logging.getLogger(__name__)


class Server(NativeRunner):
    """Serves ``module_backends`` (uid -> ModuleBackend) on ``dht``'s runtime, declaring
    them in ``dht`` every ``update_period`` seconds for ``expiration`` seconds (default
    max(2 update_period, 3)). Requests of an expert are joined into batches of at most
    ``max_batch_size`` rows (default: the backends' smallest), run once
    ``min_batch_size`` rows wait or the oldest waited ``timeout`` seconds."""

    _what = "expert server"

    def __init__(self, dht: DHT, module_backends: Dict[str, ModuleBackend], num_connection_handlers: int = 1,
                 update_period: float = 30, expiration: Optional[float] = None, start: bool = False,
                 checkpoint_dir: Optional[str] = None, checkpoint_interval: Optional[float] = None,
                 min_batch_size: int = 1, max_batch_size: Optional[int] = None, timeout: Optional[float] = None,
                 stats_report_interval: Optional[float] = None, **_: Any):
        if not module_backends:
            raise ValueError("expected at least one expert in module_backends")
        self.dht, self.module_backends = dht, dict(module_backends)
        self.update_period, self.expiration = update_period, expiration
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_interval = checkpoint_interval or update_period
        self.stats_report_interval = stats_report_interval
        self.min_batch_size = min_batch_size
        self.max_batch_size = max_batch_size or min(b.max_batch_size for b in self.module_backends.values())
        self.timeout = timeout
        self._native: Optional[Any] = None
        self._shut_down = False
        self._stop = threading.Event()
        self._chores: Optional[threading.Thread] = None
        if checkpoint_dir is not None:
            load_experts(self.module_backends, checkpoint_dir)
        if start:
            self.run_in_background()

    def run_in_background(self, await_ready: bool = True, timeout: Optional[float] = None) -> None:
        """Starts serving (returns at once: the C++ server runs on its own threads)."""
        if self._native is not None:
            raise RuntimeError("the expert server is running already")
        experts = [(uid, _Served(b), b.native_schema()) for uid, b in self.module_backends.items()]
        self._native = _apiary.ExpertServer(self.dht._require(), experts, self.max_batch_size, self.min_batch_size,
                                            self.timeout, self.update_period, self.expiration, True)
        if self.checkpoint_dir is not None or self.stats_report_interval:
            self._chores = threading.Thread(target=self._chores_loop, name="expert-server-chores", daemon=True)
            self._chores.start()

    def run(self) -> None:
        """Serves until shutdown() (from another thread) or Ctrl-C."""
        if self._native is None:
            self.run_in_background()
        try:
            while not self._stop.wait(0.5):
                pass
        finally:
            self.shutdown()

    @property
    def address(self) -> str:
        """The multiaddr (with /p2p/) clients reach the experts at."""
        return self._require().address()

    @property
    def uids(self) -> Sequence[str]:
        return list(self.module_backends)

    def counters(self) -> Dict[str, int]:
        """Batches, rows, failed batches, refused requests, DHT declarations so far."""
        return self._require().counters()

    def _chores_loop(self) -> None:
        intervals = [i for i in (self.checkpoint_interval if self.checkpoint_dir else None,
                                 self.stats_report_interval) if i]
        period = min(intervals)
        last_rows = 0
        while not self._stop.wait(period):
            if self.checkpoint_dir is not None:
                store_experts(self.module_backends, self.checkpoint_dir)
            if self.stats_report_interval and self._native is not None:
                counters = self._native.counters()
                logger.info(f"expert server: {(counters['rows'] - last_rows) / period:.1f} samples/s, "
                            f"{counters['batches']} batches, {counters['failed_batches']} failed")
                last_rows = counters["rows"]

    def shutdown(self) -> None:
        """Stops declaring and serving (idempotent); saves a last checkpoint."""
        if self._shut_down:
            return
        self._shut_down = True
        self._stop.set()
        if self._chores is not None:
            self._chores.join()
        if self._native is not None:
            self._native.stop()
        if self.checkpoint_dir is not None:
            store_experts(self.module_backends, self.checkpoint_dir)

    @classmethod
    def create(cls, num_experts: Optional[int] = None, expert_uids: Optional[Sequence[str]] = None,
               expert_pattern: Optional[str] = None, expert_cls: str = "ffn", hidden_dim: int = 1024,
               optim_cls: Any = torch.optim.Adam, scheduler: str = "none", num_warmup_steps: Optional[int] = None,
               num_training_steps: Optional[int] = None, clip_grad_norm: Optional[float] = None,
               min_batch_size: int = 1, max_batch_size: int = 4096, device: Optional[str] = None,
               initial_peers: Sequence[str] = (), checkpoint_dir: Optional[str] = None, compression: int = 0,
               stats_report_interval: Optional[float] = None, custom_module_path: Optional[str] = None,
               update_period: float = 30, expiration: Optional[float] = None, start: bool = False,
               dht: Optional[DHT] = None, seed: Optional[int] = None, **kwargs: Any) -> "Server":
        """hivemind's Server.create: ``num_experts`` experts of ``expert_cls`` (uids given,
        or drawn from ``expert_pattern`` skipping those declared already), each with its
        optimizer ``optim_cls`` and scheduler ("none" or "linear": warmup then linear
        decay), on a new DHT (``initial_peers``) unless ``dht`` is given."""
        if custom_module_path is not None:
            _import_module(custom_module_path)
        if expert_cls not in name_to_block:
            raise ValueError(f"unknown expert class '{expert_cls}'; known: {sorted(name_to_block)}")
        if dht is None:
            dht = DHT(initial_peers=list(initial_peers), start=True)
        uids = _uids(dht, num_experts, expert_uids, expert_pattern, seed)
        sample = name_to_input[expert_cls](max_batch_size, hidden_dim)
        sample = (sample,) if isinstance(sample, torch.Tensor) else tuple(sample)
        args_schema = tuple(BatchTensorDescriptor.from_tensor(t, compression) for t in sample)
        backends = {}
        for i, uid in enumerate(uids):
            if seed is not None:
                torch.manual_seed(seed + i)
            module = name_to_block[expert_cls](hidden_dim)
            if device is not None:
                module = module.to(device)
            params = [p for p in module.parameters() if p.requires_grad]
            optimizer = optim_cls(params) if optim_cls is not None and params else None
            backends[uid] = ModuleBackend(uid, module, optimizer=optimizer,
                                          scheduler=_scheduler(optimizer, scheduler, num_warmup_steps,
                                                               num_training_steps),
                                          args_schema=args_schema, max_batch_size=max_batch_size,
                                          clip_grad_norm=clip_grad_norm)
        return cls(dht, backends, update_period=update_period, expiration=expiration, start=start,
                   checkpoint_dir=checkpoint_dir, min_batch_size=min_batch_size, max_batch_size=max_batch_size,
                   stats_report_interval=stats_report_interval, **kwargs)


def _uids(dht: DHT, num_experts: Optional[int], expert_uids: Optional[Sequence[str]],
          expert_pattern: Optional[str], seed: Optional[int]) -> Sequence[str]:
    if expert_uids is not None:
        if num_experts is not None and num_experts != len(expert_uids):
            raise ValueError(f"num_experts {num_experts} does not match the {len(expert_uids)} expert_uids given")
        return list(expert_uids)
    if not num_experts:
        raise ValueError("expected expert_uids or num_experts >= 1")
    return _apiary.generate_uids_from_pattern(dht._require(), num_experts, expert_pattern or "",
                                              seed if seed is not None else int.from_bytes(os.urandom(7), "big"))


def _scheduler(optimizer: Any, kind: str, warmup: Optional[int], total: Optional[int]) -> Any:
    if kind == "none" or optimizer is None:
        return None
    if kind != "linear":
        raise ValueError(f"expected scheduler 'none' or 'linear', got '{kind}'")
    if warmup is None or total is None:
        raise ValueError("scheduler 'linear' needs num_warmup_steps and num_training_steps")

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _import_module(path: str) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("apiary_custom_experts", os.path.abspath(path))
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no Python module at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
