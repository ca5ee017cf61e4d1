"""AutoDist for PyTorch: a strategy per variable, chosen by a builder from the model and
the cluster, for a plain torch training loop.

    ad = apiary.autodist.AutoDist(resource_spec="resource_spec.yml",
                                  strategy_builder=apiary.strategy.PSLoadBalancing())
    model = Net()
    opt = ad.distribute(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for x, y in batches:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()            # PS pushes and pulls, all-reduce: the strategy's step
    ad.shutdown()

Run one process per replica of the strategy (the resource spec's devices); each
takes its rank from ``rank=`` or from its launcher's environment (``RANK`` of
``apiary launch`` and torchrun, ``OMPI_COMM_WORLD_RANK`` of mpirun, ``SLURM_PROCID``,
``PMI_RANK``). ``apiary launch --resource-spec resource_spec.yml -- python3 train.py``
starts them all on the spec's hosts (ssh) and stops them together. The roles listen on a
port range starting at ``port=`` (default: ``APIARY_PORT``, else ``MASTER_PORT`` + 1, else
15000): replica r at port + r on its host, the PS devices after the replicas; each PS
device is served by the lowest-ranked trainer process on its host, or, with
``ps_processes=True``, by PS processes (``ps_devices()`` lists them, ``serve()`` serves
one or several). Replica 0's model starts the job: the other processes take their
initial parameters from it. ``transport="shm"`` moves the bytes between processes of one
host over UCX's shared-memory lanes (cma) instead of TCP sockets. Connections are encrypted, PeerIDs
proven, unless ``insecure=True`` (plaintext), which every process of the job must choose.

``step()`` synchronizes each parameter as its strategy says: PS variables pushed to and
pulled from their shards (partitioned, with proxies, BSP / SSP / async), all-reduced ones
averaged in their fusion groups (with their compressor) and updated by the replica's
own copy of the optimizer, sparse gradients (``nn.Embedding(sparse=True)``) as the rows
they touch. The update rule is the torch optimizer's, run by apiary where the variable
lives: ``torch.optim.SGD`` (momentum, Nesterov) and ``torch.optim.Adam`` without weight
decay. Adam adds epsilon to sqrt(v) before the bias correction of v (TensorFlow's
form, as AutoDist did), which differs from torch's by epsilon * (1 - sqrt(1 - beta2^t)).
Each step runs at the torch optimizer's learning rate of the moment, so its schedulers
(``torch.optim.lr_scheduler.*`` built on the optimizer passed to ``distribute``) drive
the PS shards and the replicas' updates alike.
"""
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from . import _apiary
from .strategy import PSLoadBalancing, StrategyBuilder

__all__ = ["AutoDist", "DistributedOptimizer", "rank_from_environment"]

_RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK")
_SIZE_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE")


def rank_from_environment() -> Tuple[int, Optional[int]]:
    """(rank, world size or None) as a launcher set them: torchrun, mpirun, Slurm, PMI;
    (0, None) without one."""
    rank, size = 0, None
    for name in _RANK_VARIABLES:
        if os.environ.get(name, "") != "":
            rank = int(os.environ[name])
            break
    for name in _SIZE_VARIABLES:
        if os.environ.get(name, "") != "":
            size = int(os.environ[name])
            break
    return rank, size


def _default_port() -> int:
    if os.environ.get("APIARY_PORT"):
        return int(os.environ["APIARY_PORT"])
    if os.environ.get("MASTER_PORT"):
        return int(os.environ["MASTER_PORT"]) + 1
    return 15000


def _optimizer_config(optimizer: torch.optim.Optimizer) -> Dict[str, Any]:
    """The update rule of a torch optimizer, as apiary's optimizers run it."""
    groups = optimizer.param_groups
    keys = [k for k in groups[0] if k != "params"]
    for g in groups[1:]:
        if any(g.get(k) != groups[0].get(k) for k in keys):
            raise NotImplementedError("expected one set of hyper-parameters for every parameter group")
    g = groups[0]
    if g.get("weight_decay", 0) or g.get("maximize", False):
        raise NotImplementedError(f"{type(optimizer).__name__}: weight_decay and maximize are not supported")
    if isinstance(optimizer, torch.optim.SGD):
        if g.get("dampening", 0):
            raise NotImplementedError("SGD: dampening is not supported")
        if g["momentum"] == 0:
            if g.get("nesterov"):
                raise ValueError("SGD: Nesterov momentum needs a momentum > 0")
            return dict(kind="sgd", lr=float(g["lr"]))
        return dict(kind="momentum", lr=float(g["lr"]), momentum=float(g["momentum"]), nesterov=bool(g["nesterov"]))
    if isinstance(optimizer, torch.optim.Adam):
        if g.get("amsgrad"):
            raise NotImplementedError("Adam: amsgrad is not supported")
        beta1, beta2 = g["betas"]
        return dict(kind="adam", lr=float(g["lr"]), beta1=float(beta1), beta2=float(beta2), epsilon=float(g["eps"]))
    raise NotImplementedError(f"expected torch.optim.SGD or torch.optim.Adam, got {type(optimizer).__name__}")


def _flat(t: torch.Tensor) -> np.ndarray:
    return t.detach().reshape(-1).numpy()


class DistributedOptimizer:
    """The wrapped optimizer ``AutoDist.distribute`` returns: ``step()`` is the strategy's
    synchronized step, ``zero_grad()`` clears the gradients; ``param_groups`` and
    ``state_dict()`` are the distributed job's.

    A dense parameter's ``.grad`` is a tensor over the job's own gradient memory (as DDP's
    bucket views): ``backward()`` adds into it and ``step()`` hands it to the strategy
    without a copy. After ``step()`` it holds what the step left there (for an all-reduced
    variable, the averaged gradient) until ``zero_grad()``. A ``.grad`` the trainer
    replaces, or sets to None (``zero_grad(set_to_none=True)``), is copied at the next step
    instead, and the parameter's ``.grad`` is the job's memory again after it."""

    def __init__(self, autodist: "AutoDist", job: Any, named: List[Tuple[str, torch.nn.Parameter]],
                 optimizer: torch.optim.Optimizer, sparse: Sequence[str] = ()):
        self._autodist = autodist
        self._job = job
        self._named = named
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self.local_step = 0
        # The parameters' version the last pull gave (updates applied to the slowest PS
        # piece): the step itself under BSP, at least step - staleness under SSP.
        self.version = 0
        # The parameters' memory, which each pull overwrites in place.
        self._views = {name: _flat(p.data) for name, p in named}
        self._zeros: Dict[str, np.ndarray] = {}
        # The dense gradients live in the job's own memory (as DDP's live in its buckets):
        # each dense parameter's .grad is a tensor over it, which backward() adds into and
        # step() lends to the job without a copy. A .grad replaced by the trainer (or set to
        # None) is copied instead.
        self._dense = [(n, p) for n, p in named if n not in set(sparse)]
        self._arrays: Dict[str, np.ndarray] = {}
        self._bound: Dict[str, torch.Tensor] = {}
        self._bind_gradients(keep_grads=True)
        # Seconds the last step() spent gathering the gradients, pushing them (the
        # strategy's reduction included) and pulling the next parameters.
        self.last_step_seconds: Dict[str, float] = {}

    @property
    def rank(self) -> int:
        return self._job.rank

    @property
    def num_replicas(self) -> int:
        return self._job.replicas

    @property
    def summary(self) -> str:
        """How the strategy places the variables."""
        return self._job.summary

    def zero_grad(self, set_to_none: bool = False) -> None:
        for _, p in self._named:
            if p.grad is None:
                continue
            if set_to_none or p.grad.is_sparse:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    def _bind_gradients(self, keep_grads: bool) -> None:
        """Points each dense parameter's .grad at the job's gradient memory, copying the
        current .grad there when `keep_grads` (never after the memory moved: the old .grad
        was over it)."""
        self._arrays = self._job.gradient_arrays({n: p.numel() for n, p in self._dense})
        self._bound = {}
        with torch.no_grad():
            for name, p in self._dense:
                # A tensor of its own over the memory (not a torch view: zero_grad detaches it).
                view = torch.from_numpy(self._arrays[name].reshape(tuple(p.shape)))
                if keep_grads and p.grad is not None and not p.grad.is_sparse:
                    view.copy_(p.grad)
                p.grad = view
                self._bound[name] = view

    def _rebind_gradients(self) -> None:
        """After a step: a dense .grad that was set to None or replaced (and so copied on
        push) points at the job's memory again, which holds what the step left."""
        for name, p in self._dense:
            if p.grad is not self._bound[name]:
                p.grad = self._bound[name]

    def _gradients(self) -> Tuple[Dict[str, np.ndarray], Dict[str, Tuple[np.ndarray, np.ndarray]]]:
        """Dense gradients by name (the job's own arrays where .grad is still bound to
        them), and the sparse ones as (rows, values)."""
        grads, rows = {}, {}
        for name, p in self._named:
            g = p.grad
            if g is not None and g is self._bound.get(name):
                grads[name] = self._arrays[name]
                continue
            if g is None:
                if name not in self._zeros:
                    self._zeros[name] = np.zeros(p.numel(), dtype=np.float32)
                grads[name] = self._zeros[name]
                continue
            if g.is_sparse:
                g = g.coalesce()
                rows[name] = (np.ascontiguousarray(g.indices()[0].numpy(), dtype=np.int64),
                              np.ascontiguousarray(_flat(g.values()), dtype=np.float32))
                continue
            grads[name] = np.ascontiguousarray(_flat(g), dtype=np.float32)
        return grads, rows

    def step(self, closure: Optional[Callable[[], Any]] = None, batch_size: Optional[float] = None) -> Any:
        """One synchronized step: this replica's gradients (from ``batch_size`` samples,
        the averaging weight; default 1 per replica) pushed and reduced as the strategy
        says, then the next step's parameters pulled into the model."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        started = time.perf_counter()
        grads, rows = self._gradients()
        gathered = time.perf_counter()
        if self._job.push(grads, float(1.0 if batch_size is None else batch_size), rows, self._learning_rate()):
            self._bind_gradients(keep_grads=False)  # the job's gradient memory moved
        else:
            self._rebind_gradients()
        pushed = time.perf_counter()
        self.version = self._job.pull(self._views)
        self.last_step_seconds = dict(gradients=gathered - started, push=pushed - gathered,
                                      pull=time.perf_counter() - pushed)
        self.local_step += 1
        return loss

    def _learning_rate(self) -> float:
        """This step's rate: the torch optimizer's now (a scheduler may have changed it),
        the same in every parameter group."""
        rates = {float(g["lr"]) for g in self.optimizer.param_groups}
        if len(rates) != 1:
            raise NotImplementedError(f"expected one learning rate for every parameter group, got {sorted(rates)}")
        (rate,) = rates
        if not (rate > 0) or rate == float("inf"):
            raise ValueError(f"expected a learning rate > 0, got {rate}")
        return rate

    def state_dict(self) -> Dict[str, Any]:
        return self._autodist.state_dict()


class AutoDist:
    """A trainer process's AutoDist: ``distribute(model, optimizer)`` builds the strategy
    from the model's parameters and the resource spec, starts this process's roles and
    returns the wrapped optimizer."""

    def __init__(self, resource_spec: str = "resource_spec.yml", strategy_builder: Optional[StrategyBuilder] = None,
                 *, strategy_file: Optional[str] = None, rank: Optional[int] = None, port: Optional[int] = None,
                 job: str = "apiary.autodist", timeout: float = 30.0, patience: float = 120.0,
                 ps_processes: bool = False, transport: str = "tcp", insecure: bool = False,
                 drop_lost_replicas_after: Optional[float] = None, ps_restart_wait: float = 0.0,
                 replay_steps: int = 0, rejoin: bool = False):
        """``drop_lost_replicas_after`` (seconds; processes serving PS devices): a replica
        whose process is lost is dropped that long after, and the synchronous shards go on
        with the replicas left (the mean over them); None: a lost replica ends the job.
        ``ps_restart_wait`` (seconds; replicas of a job with ``ps_processes``): a PS process
        that goes down is waited for that long, to be started again with
        ``serve(..., resume=checkpoint)``; the replicas then replay their pushes since the
        checkpoint, keeping those of the last ``replay_steps`` steps (at least twice the
        steps between two checkpoints). ``rejoin``: this replica's process is started again
        after the job dropped it; it takes the running job's parameters from the PS devices
        (``distribute`` returns with them, ``optimizer.version`` the step it rejoins at) and
        trains on from there (PS variables only; with ``ps_processes`` for replica 0)."""
        if not os.path.exists(resource_spec):
            raise FileNotFoundError(f"resource spec {resource_spec!r} not found")
        if strategy_builder is not None and not isinstance(strategy_builder, StrategyBuilder):
            raise TypeError(f"expected a builder of apiary.strategy, got {type(strategy_builder).__name__}")
        self.resource_spec = resource_spec
        self.strategy_builder = strategy_builder or PSLoadBalancing()
        self.strategy_file = strategy_file or ""
        env_rank, self.world_size = rank_from_environment()
        self.rank = env_rank if rank is None else int(rank)
        self.port = _default_port() if port is None else int(port)
        self.job = job
        self.timeout = float(timeout)
        self.patience = float(patience)
        self.ps_processes = bool(ps_processes)
        if transport not in ("tcp", "shm"):
            raise ValueError(f"expected transport 'tcp' or 'shm', got {transport!r}")
        self.transport = transport
        self.insecure = bool(insecure)  # plaintext; every process of the job must choose it
        if drop_lost_replicas_after is not None and not drop_lost_replicas_after >= 0:
            raise ValueError(f"expected drop_lost_replicas_after >= 0 seconds or None, got {drop_lost_replicas_after!r}")
        if not ps_restart_wait >= 0 or int(replay_steps) < 0:
            raise ValueError(f"expected ps_restart_wait >= 0 seconds and replay_steps >= 0, got {ps_restart_wait!r} "
                             f"and {replay_steps!r}")
        self.drop_lost_replicas_after = drop_lost_replicas_after
        self.ps_restart_wait = float(ps_restart_wait)
        self.replay_steps = int(replay_steps)
        self.rejoin = bool(rejoin)
        self._resume_at = -1
        self._native: Any = None
        self._named: List[Tuple[str, torch.nn.Parameter]] = []
        self._restore: Optional[Dict[str, Any]] = None
        self.optimizer: Optional[DistributedOptimizer] = None

    def _variables(self, model: torch.nn.Module) -> Tuple[List[Tuple[str, torch.nn.Parameter]], List[Any]]:
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("expected a model with trainable parameters")
        for name, p in named:
            if p.dtype != torch.float32 or p.device.type != "cpu" or not p.data.is_contiguous():
                raise ValueError(f"{name}: expected a contiguous float32 CPU parameter, got {p.dtype} on {p.device}")
        sparse = {f"{prefix}{'.' if prefix else ''}weight" for prefix, m in model.named_modules()
                  if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse}
        return named, [(n, list(p.shape), n in sparse) for n, p in named]

    def ps_devices(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> List[str]:
        """The PS devices the strategy puts the model's variables on (starts nothing): one
        ``serve`` process each when the job has PS processes."""
        _, variables = self._variables(model)
        builder = self.strategy_builder
        return list(_apiary.autodist_ps_devices(self.resource_spec, variables, builder.name, dict(builder.options),
                                                self.strategy_file, _optimizer_config(optimizer), self.job))

    def serve(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: Union[str, Sequence[str]],
              resume: Optional[Dict[str, Any]] = None) -> None:
        """Serves PS device ``device`` of the strategy (or each of several) in this process (a
        PS process of a job whose trainers pass ``ps_processes=True``), from replica 0's
        initial values, until ``shutdown()``; returns once it serves. ``resume``: this PS
        process is started again after it went down, and its devices continue the running
        job from that checkpoint (a ``state_dict()`` of the job, taken at its ``step``;
        bulk-synchronous shards only), while the replicas, waiting for it
        (``ps_restart_wait``), replay their pushes since."""
        devices = [device] if isinstance(device, str) else list(device)
        if not devices or not all(isinstance(d, str) and d for d in devices):
            raise ValueError(f"expected a PS device or a list of them, got {device!r}")
        if resume is not None:
            if "params" not in resume or "step" not in resume:
                raise ValueError("expected resume to be a state of AutoDist.state_dict()")
            self.load_state_dict(resume)
            self._resume_at = int(resume["step"])
        self._start(model, optimizer, serve_devices=devices)

    def distribute(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> DistributedOptimizer:
        return self._start(model, optimizer)

    def _start(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, serve_devices: Sequence[str] = ()):
        if self._native is not None:
            raise RuntimeError("this AutoDist already distributes a model; make one AutoDist per model")
        config = _optimizer_config(optimizer)
        named, variables = self._variables(model)
        states: Dict[str, Any] = {}
        if self._restore is not None:
            with torch.no_grad():
                for name, p in named:
                    if name not in self._restore["params"]:
                        raise KeyError(f"the checkpoint has no {name}")
                    p.copy_(torch.as_tensor(self._restore["params"][name]).reshape(p.shape))
            states = self._restore.get("optimizer", {})
        initial = {n: np.ascontiguousarray(_flat(p.data), dtype=np.float32) for n, p in named}
        builder = self.strategy_builder
        self._native = _apiary.AutoDistJob(self.resource_spec, variables, initial, self.rank, self.port, builder.name,
                                           dict(builder.options), self.strategy_file, config, self.timeout,
                                           self.patience, self.job, states, list(serve_devices), self.ps_processes,
                                           self.transport, self.insecure,
                                           -1.0 if self.drop_lost_replicas_after is None
                                           else float(self.drop_lost_replicas_after),
                                           self.ps_restart_wait, self.replay_steps, self._resume_at, self.rejoin)
        self._named = named
        if serve_devices:
            return None
        if self.world_size is not None and self.world_size != self._native.replicas:
            replicas = self._native.replicas
            self.shutdown()
            raise ValueError(f"the launcher started {self.world_size} processes, but the strategy has {replicas} "
                             f"replicas (the resource spec's devices)")
        self.optimizer = DistributedOptimizer(self, self._native, named, optimizer,
                                              sparse=[n for n, _, is_sparse in variables if is_sparse])
        # The first step's parameters: replica 0's, or the PS's (a rejoining replica's: the
        # running job's, at the step it rejoins at).
        self.optimizer.version = self._native.pull(self.optimizer._views)
        return self.optimizer

    @property
    def strategy(self) -> str:
        """The strategy built for the model (protobuf text)."""
        return self._require().strategy

    def _require(self) -> Any:
        if self._native is None:
            raise RuntimeError("expected a distributed model; call distribute(model, optimizer) first")
        return self._native

    def state_dict(self) -> Dict[str, Any]:
        """Every parameter whole and its optimizer state (the PS ones read from their
        shards): a checkpoint any strategy can load (``load_state_dict`` before
        ``distribute``)."""
        native = self._require()
        states = native.optimizer_states()
        params = {n: p.detach().clone() for n, p in self._named}
        step = self.optimizer.local_step if self.optimizer is not None else 0
        return {"step": step, "params": params, "optimizer": {n: (int(u), np.array(m), np.array(v))
                                                            for n, (u, m, v) in states.items()}}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Starts the job from a checkpoint of ``state_dict()`` (call before ``distribute``;
        every process loads the same one)."""
        if self._native is not None:
            raise RuntimeError("load_state_dict must come before distribute(): the job starts from it")
        if "params" not in state:
            raise ValueError("expected a state of AutoDist.state_dict()")
        self._restore = state

    def shutdown(self) -> None:
        """Leaves the job (waiting for the other replicas to finish) and stops this
        process's roles."""
        if self._native is None:
            return
        try:
            self._native.leave()
        finally:
            self._native.shutdown()
            self._native = None

    def __enter__(self) -> "AutoDist":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
