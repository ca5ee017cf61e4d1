"""apiary.optim.TrainingStateAverager: hivemind's TrainingStateAverager on apiary's averager.

Holds a peer's training state (parameters, optimizer, scheduler, optimizer statistics
and extra tensors such as batch-norm statistics), runs the optimizer step and averages
the state with peers, either at once or in a background thread (delayed updates, applied
at a later step() call), and downloads the state of the most advanced peer when a
trainer falls behind. The epoch travels with the state; the scheduler follows the
epoch, not the number of steps.
"""
import logging
import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import chain
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from ..averaging import DecentralizedAverager, StepControl
from ..compression import CompressionInfo, TensorDescriptor, TensorRole
from ..serializer import MSGPackSerializer

logger = logging.getLogger(__name__)

Parameters = Iterable[torch.Tensor]
ParamGroups = Iterable[Dict[str, Any]]
OptimizerFactory = Callable[[Union[Parameters, ParamGroups]], torch.optim.Optimizer]
_LRScheduler = getattr(torch.optim.lr_scheduler, "LRScheduler", torch.optim.lr_scheduler._LRScheduler)
SchedulerFactory = Callable[[torch.optim.Optimizer], Any]


def dump_optimizer_state(optimizer: torch.optim.Optimizer) -> Tuple[Dict[str, Any], List[torch.Tensor]]:
    """The optimizer's state as msgpack-serializable metadata and a list of tensors: the
    metadata holds the param groups and, for each parameter's state, its plain values
    and the index, dtype and shape of each tensor value."""
    state_dict = optimizer.state_dict()
    tensors: List[torch.Tensor] = []
    states = []
    for index in sorted(state_dict["state"]):
        entry = {}
        for key, value in state_dict["state"][index].items():
            if isinstance(value, torch.Tensor):
                entry[key] = dict(tensor=len(tensors), dtype=str(value.dtype).replace("torch.", ""),
                                  shape=list(value.shape))
                tensors.append(value.detach().cpu().reshape(-1).contiguous())
            else:
                entry[key] = dict(value=value)
        states.append([index, entry])
    groups = [dict(group) for group in state_dict["param_groups"]]
    return dict(param_groups=groups, state=states), tensors


def load_optimizer_state(optimizer: torch.optim.Optimizer, metadata: Dict[str, Any],
                         tensors: Sequence[torch.Tensor]) -> None:
    """Loads what dump_optimizer_state gave (ValueError when it does not fit the optimizer)."""
    try:
        groups = [dict(group) for group in metadata["param_groups"]]
        state: Dict[int, Dict[str, Any]] = {}
        for index, entry in metadata["state"]:
            values = {}
            for key, value in entry.items():
                if "tensor" in value:
                    tensor = tensors[value["tensor"]]
                    dtype = getattr(torch, value["dtype"])
                    values[key] = tensor.to(dtype).reshape(tuple(value["shape"])).clone()
                else:
                    values[key] = value["value"]
            state[int(index)] = values
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise ValueError(f"expected optimizer metadata as dump_optimizer_state writes it: {e!r}") from e
    if len(groups) != len(optimizer.param_groups) or any(
            len(g["params"]) != len(own["params"]) for g, own in zip(groups, optimizer.param_groups)):
        raise ValueError("expected the optimizer state of the same parameter groups, got another layout")
    optimizer.load_state_dict(dict(state=state, param_groups=groups))


@torch.no_grad()
def _initialize_optimizer_state_(optimizer: torch.optim.Optimizer) -> None:
    """Makes the optimizer create its statistics (one step with zero gradients) and
    leaves no other trace: parameters, gradients and step counters are as before."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved = [p.detach().clone() for p in params]
    grads = [p.grad for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for p, value, grad in zip(params, saved, grads):
        p.copy_(value)
        p.grad = grad
        state = optimizer.state.get(p, {})
        if "step" in state:
            if isinstance(state["step"], torch.Tensor):
                state["step"].zero_()
            else:
                state["step"] = 0


class TrainingStateAverager(DecentralizedAverager):
    """The training state of a peer, averaged with peers and shared with newcomers
    (hivemind.optim.state_averager.TrainingStateAverager; arguments are its).

    :param optimizer: a torch optimizer, or a factory making one from param groups
    :param params: the parameters or param groups (default: the optimizer's)
    :param scheduler: an LR scheduler, or a factory making one from the optimizer;
      it is stepped to the local epoch, not per step
    :param initialize_optimizer: create the optimizer's statistics now (default: when it
      has none); no parameter changes
    :param offload_optimizer: the optimizer runs on float32 CPU copies of the parameters,
      which are copied back into the parameters after each step
    :param custom_gradients: with offload_optimizer, the offloaded gradients are written
      by the caller (hivemind.Optimizer's averaged gradients), not copied from .grad
    :param reuse_tensors: average the optimizer's own tensors in place (float32, CPU)
      instead of copies (default: offload_optimizer and not delta_rule_averaging)
    :param delta_rule_averaging: apply a delayed average as ``tensor += average -
      tensor at averaging start``, keeping the local steps made meanwhile
    :param sync_epoch_when_averaging: take the group's largest epoch after averaging
    :param parameter_names: names of the parameters, in order (default: indices)
    :param average_opt_statistics: names of optimizer statistics averaged too (e.g.
      ``("exp_avg_sq",)``)
    :param extra_tensors: other tensors averaged and shared (e.g. batch-norm buffers)
    :param kwargs: DecentralizedAverager's options (prefix, target_group_size, ...)
    """

    def __init__(
        self,
        *,
        dht: Any,
        optimizer: Union[torch.optim.Optimizer, OptimizerFactory],
        params: Optional[Union[Parameters, ParamGroups]] = None,
        scheduler: Optional[Union[Any, SchedulerFactory]] = None,
        initialize_optimizer: Optional[bool] = None,
        offload_optimizer: bool = False,
        custom_gradients: bool = False,
        reuse_tensors: Optional[bool] = None,
        delta_rule_averaging: bool = False,
        performance_ema_alpha: float = 0.1,
        sync_epoch_when_averaging: bool = False,
        parameter_names: Optional[Sequence[str]] = None,
        average_opt_statistics: Sequence[str] = (),
        extra_tensors: Sequence[torch.Tensor] = (),
        status_loglevel: int = logging.DEBUG,
        **kwargs: Any,
    ):
        average_opt_statistics = tuple(average_opt_statistics)
        if not all(isinstance(key, str) for key in average_opt_statistics):
            raise TypeError(f"expected names of optimizer statistics, got {average_opt_statistics!r}")
        if reuse_tensors is None:
            reuse_tensors = offload_optimizer and not delta_rule_averaging
        if reuse_tensors and delta_rule_averaging:
            raise ValueError("reuse_tensors and delta_rule_averaging cannot be used together: the delta rule needs "
                             "the averaged tensors apart from the local ones")
        if custom_gradients and not offload_optimizer:
            logger.warning("custom_gradients=True has no effect without offload_optimizer")
        param_groups, main_parameters, names = self._check_params(optimizer, params, parameter_names)
        self.status_loglevel = status_loglevel
        self.offload_optimizer, self.custom_gradients = bool(offload_optimizer), bool(custom_gradients)
        self.reuse_tensors, self.delta_rule_averaging = bool(reuse_tensors), bool(delta_rule_averaging)
        self.main_parameters, self.parameter_names = main_parameters, names
        self._averaged_parameters = tuple(self._host_tensor(p, force_copy=self.offload_optimizer)
                                          for p in main_parameters)
        self.optimizer, self.scheduler = self._make_components(param_groups, optimizer, scheduler, initialize_optimizer)
        self.opt_keys_for_averaging = average_opt_statistics
        self.extra_tensors = tuple(extra_tensors)
        self.sync_epoch_when_averaging = bool(sync_epoch_when_averaging)
        self.local_epoch = 0
        self._old_tensors: Optional[List[torch.Tensor]] = None
        self.step_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="state_averager")
        self.finished_optimizer_step = threading.Event()
        self.finished_averaging_round = threading.Event()
        self.lock_optimizer = threading.Lock()
        self.lock_averaging = threading.Lock()
        self.pending_updates: set = set()
        self._averaging_in_progress = False
        averaged = self._make_averaged_tensors()
        super().__init__(averaged_tensors=averaged, dht=dht, tensor_infos=self._tensor_infos(averaged), **kwargs)

    # ------------------------------------------------------------------ set-up
    @staticmethod
    def _check_params(optimizer: Any, params: Any, names: Optional[Sequence[str]]):
        if params is None:
            if not hasattr(optimizer, "param_groups"):
                raise ValueError("expected params, or an optimizer with param_groups")
            params = optimizer.param_groups
        groups = tuple(params)
        if all(isinstance(p, torch.Tensor) for p in groups):
            groups = (dict(params=list(groups)),)
        for group in groups:
            if not isinstance(group, dict) or group.get("params") is None:
                raise ValueError("expected parameters or param groups (dicts with 'params')")
            group["params"] = list(group["params"])
            if not all(isinstance(p, torch.Tensor) for p in group["params"]):
                raise TypeError("expected tensors in every param group's 'params'")
        parameters = tuple(chain(*(group["params"] for group in groups)))
        if not parameters:
            raise ValueError("expected at least one parameter")
        if len({id(p) for p in parameters}) != len(parameters):
            raise ValueError("expected each parameter once, but a parameter appears in several places")
        names = tuple(range(len(parameters))) if names is None else tuple(names)
        if len(names) != len(parameters):
            raise ValueError(f"expected {len(parameters)} parameter names, got {len(names)}")
        return groups, parameters, names

    def _host_tensor(self, source: torch.Tensor, force_copy: bool = False) -> torch.Tensor:
        """The tensor averaged for ``source``: itself (reuse_tensors) or a float32 CPU copy."""
        if self.reuse_tensors and not force_copy:
            if source.device.type != "cpu" or source.dtype != torch.float32 or not source.is_contiguous():
                raise ValueError("reuse_tensors needs contiguous float32 CPU tensors, got "
                                 f"{source.dtype} on {source.device}; use reuse_tensors=False")
            return source
        return source.detach().to(device="cpu", dtype=torch.float32, copy=True).contiguous().requires_grad_(
            source.requires_grad)

    def _make_components(self, param_groups, optimizer_or_factory, scheduler_or_factory, initialize):
        optimizer_is_factory = callable(optimizer_or_factory) and not isinstance(optimizer_or_factory,
                                                                                 torch.optim.Optimizer)
        scheduler_is_factory = callable(scheduler_or_factory) and not isinstance(scheduler_or_factory, _LRScheduler)
        if optimizer_is_factory and scheduler_or_factory is not None and not scheduler_is_factory:
            raise ValueError("expected a scheduler factory with an optimizer factory: the scheduler must be made "
                             "for the optimizer made here")
        if self.offload_optimizer and not optimizer_is_factory:
            raise ValueError("offload_optimizer needs an optimizer factory (the optimizer runs on copies made here)")
        if optimizer_is_factory:
            if self.offload_optimizer:
                if self.reuse_tensors:
                    for_optimizer = self._averaged_parameters
                else:
                    for_optimizer = tuple(t.detach().clone().requires_grad_(t.requires_grad)
                                          for t in self._averaged_parameters)
                groups, start = [], 0
                for group in param_groups:
                    count = len(group["params"])
                    groups.append(dict(group, params=list(for_optimizer[start:start + count])))
                    start += count
                for param in for_optimizer:
                    if param.grad is None:
                        param.grad = torch.zeros_like(param)
            else:
                groups = list(param_groups)
            optimizer = optimizer_or_factory(groups)
        else:
            optimizer = optimizer_or_factory
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if len(optimizer.param_groups) != len(param_groups):
            raise ValueError("expected the optimizer to hold the given param groups")
        if initialize is None:
            initialize = not any(isinstance(v, torch.Tensor) for s in optimizer.state.values() for v in s.values())
        if initialize:
            _initialize_optimizer_state_(optimizer)
        scheduler = scheduler_or_factory(optimizer) if scheduler_is_factory else scheduler_or_factory
        if scheduler is not None and getattr(scheduler, "optimizer", None) is not optimizer:
            raise ValueError("expected a scheduler of this averager's optimizer")
        return optimizer, scheduler

    def _optimized_parameters(self) -> Iterator[torch.Tensor]:
        for group in self.optimizer.param_groups:
            yield from group["params"]

    def _local_tensors(self) -> Iterator[torch.Tensor]:
        """The trainer's tensors averaged with peers: parameters (the optimizer's, which
        are the offloaded copies with offload_optimizer), statistics, extras."""
        yield from self._optimized_parameters()
        for key in self.opt_keys_for_averaging:
            for param in self._optimized_parameters():
                state = self.optimizer.state.get(param, {})
                if key not in state:
                    raise ValueError(f"expected optimizer statistic {key!r} for every parameter, but it is missing; "
                                     f"the optimizer has {sorted(state)}")
                yield state[key]
        yield from self.extra_tensors

    @torch.no_grad()
    def _make_averaged_tensors(self) -> List[torch.Tensor]:
        local = list(self._local_tensors())
        others = local[len(self._averaged_parameters):]
        averaged_params = [p.detach() for p in self._averaged_parameters]
        if self.reuse_tensors and self.offload_optimizer:
            averaged_params = [p.detach() for p in self._optimized_parameters()]
        return averaged_params + [self._host_tensor(t) for t in others]

    def _tensor_infos(self, averaged: Sequence[torch.Tensor]) -> List[CompressionInfo]:
        n_params, n_stats = len(self.main_parameters), len(self.main_parameters) * len(self.opt_keys_for_averaging)
        infos = []
        for i, tensor in enumerate(averaged):
            if i < n_params:
                key, role = self.parameter_names[i], TensorRole.PARAMETER
            elif i < n_params + n_stats:
                j = i - n_params
                key = (self.opt_keys_for_averaging[j // n_params], self.parameter_names[j % n_params])
                role = TensorRole.OPTIMIZER
            else:
                key, role = i, TensorRole.UNSPECIFIED
            infos.append(CompressionInfo(key, TensorDescriptor(tuple(tensor.shape)), role))
        return infos

    # ------------------------------------------------------------------ stepping
    def step(
        self,
        wait_for_delayed_updates: Optional[bool] = None,
        apply_delayed_updates: bool = True,
        increment_epoch: bool = False,
        optimizer_step: bool = False,
        zero_grad: bool = False,
        delay_optimizer_step: bool = False,
        averaging_round: bool = False,
        delay_averaging: Optional[bool] = None,
        averaging_control: Optional[StepControl] = None,
        wait_for_trigger: Optional[Callable[[], Any]] = None,
        grad_scaler: Any = None,
        set_to_none: bool = False,
        averaging_opts: Optional[Dict[str, Any]] = None,
        wait_for_delayed_update: Optional[bool] = None,
    ) -> Optional[Future]:
        """One step of the training state: apply finished delayed updates, move to the
        next epoch, run the optimizer, zero the gradients, average with peers, in this
        order; the optimizer step and the averaging run in a background thread, waited
        for unless delayed (delay_optimizer_step, delay_averaging); a delayed update is
        applied at a later step(). Returns the background work's Future, if any.

        :param averaging_control: a pre-scheduled round (schedule_step()), triggered here
        :param wait_for_trigger: called in the background before the optimizer step
          (e.g. waiting for averaged gradients)
        :param averaging_opts: DecentralizedAverager.step's options (timeout, ...)
        """
        if wait_for_delayed_update is not None:  # hivemind's older spelling
            wait_for_delayed_updates = wait_for_delayed_update
        if grad_scaler is not None:
            raise ValueError("expected grad_scaler=None: apiary's optimizer has no loss scaling (CPU float32 state)")
        if delay_averaging is None:
            delay_averaging = delay_optimizer_step
        if wait_for_delayed_updates is None:
            wait_for_delayed_updates = optimizer_step or zero_grad or averaging_round
        if averaging_control is not None and not averaging_round:
            raise ValueError("expected averaging_round=True with an averaging_control")
        if averaging_opts and not averaging_round:
            raise ValueError("expected averaging_round=True with averaging_opts")
        if delay_optimizer_step and not optimizer_step:
            raise ValueError("expected optimizer_step=True with delay_optimizer_step")
        if wait_for_trigger is not None and not (optimizer_step or averaging_round or zero_grad):
            raise ValueError("expected an optimizer step, zero_grad or an averaging round to wait for a trigger")
        if averaging_control is not None and averaging_control.done():
            raise ValueError("expected a scheduled averaging round that is still running, got one that ended")
        if wait_for_delayed_updates:
            for pending in list(self.pending_updates):
                pending.result()  # raises what the background work raised
        if apply_delayed_updates:
            self._apply_finished_updates()
        if increment_epoch:
            self.local_epoch += 1
            if not optimizer_step:  # otherwise after the step: it runs with the last epoch's rate
                self._update_scheduler()
        if not (optimizer_step or zero_grad or averaging_round):
            return None
        if self.offload_optimizer and not self.custom_gradients:
            self._load_local_grads_into_optimizer_()
            if zero_grad:  # the trainer's gradients were taken: zero them as the optimizer's
                self._zero_main_grads(set_to_none)
        work = self.step_executor.submit(
            self._do, wait_for_trigger, optimizer_step, zero_grad, averaging_round, averaging_control,
            set_to_none, dict(averaging_opts or {}))
        self.pending_updates.add(work)
        work.add_done_callback(self.pending_updates.discard)
        if (optimizer_step or zero_grad) and not delay_optimizer_step:
            self.finished_optimizer_step.wait()
            self.finished_optimizer_step.clear()
            if self.offload_optimizer:
                self._apply_optimizer_parameters_()
        if averaging_round and not delay_averaging:
            work.result()
            self._apply_finished_updates()
        elif not averaging_round and not delay_optimizer_step:
            work.result()
        return work

    def schedule_step(self, scheduled_time: Optional[float] = None, **kwargs: Any) -> StepControl:
        """Starts matchmaking for an averaging round that begins once a step() with
        ``averaging_control=`` the returned control triggers it (gather: the local epoch,
        unless given)."""
        kwargs.setdefault("gather", self.local_epoch)
        return DecentralizedAverager.step(self, scheduled_time=scheduled_time, wait=False, require_trigger=True,
                                          **kwargs)

    def _apply_finished_updates(self) -> None:
        if self.finished_averaging_round.is_set():
            if not self.reuse_tensors:
                self._apply_averaging_results_()
            if self.offload_optimizer:
                self._apply_optimizer_parameters_()
            self.finished_averaging_round.clear()
        if self.finished_optimizer_step.is_set():
            if self.offload_optimizer:
                self._apply_optimizer_parameters_()
            self.finished_optimizer_step.clear()

    def _do(self, wait_for_trigger, optimizer_step, zero_grad, averaging_round, averaging_control, set_to_none,
            averaging_opts) -> None:
        """The background part of step(): optimizer, zero_grad, then the averaging round."""
        try:
            if wait_for_trigger is not None:
                wait_for_trigger()
            if optimizer_step or zero_grad:
                with self.lock_optimizer:
                    if optimizer_step:
                        self.optimizer.step()
                        self._update_scheduler()
                    if zero_grad:
                        self.optimizer.zero_grad(set_to_none=set_to_none)
                self.finished_optimizer_step.set()
            if averaging_round:
                self._averaging_in_progress = True
                try:
                    self._average_round(averaging_control, averaging_opts)
                except BaseException as e:  # the round did not happen; training goes on
                    logger.warning(f"state averager: averaging round failed: {e!r}")
                finally:
                    self._averaging_in_progress = False
        except BaseException as e:
            self.finished_optimizer_step.set()  # nobody waits forever for a step that failed
            logger.error(f"state averager: optimizer step failed: {e!r}")
            raise

    @property
    def averaging_in_progress(self) -> bool:
        """An averaging round runs in the background now."""
        return self._averaging_in_progress

    def _average_round(self, averaging_control: Optional[StepControl], averaging_opts: Dict[str, Any]) -> None:
        with self.lock_averaging:
            if not self.reuse_tensors:
                self._load_local_tensors_into_averager_()
            if self.delta_rule_averaging:
                with self.get_tensors() as averaged:
                    self._old_tensors = [t.detach().clone() for t in averaged]
            try:
                if averaging_control is not None:
                    averaging_control.allow_allreduce()
                    gathered = averaging_control.result(averaging_opts.get("timeout"))
                else:
                    gathered = DecentralizedAverager.step(self, gather=self.local_epoch, **averaging_opts)
            except BaseException:
                self._old_tensors = None
                raise
            if self.sync_epoch_when_averaging:
                epochs = [g for g in (gathered or {}).values() if isinstance(g, int)]
                if epochs and max(epochs) > self.local_epoch:
                    self.local_epoch = max(epochs)
                    self._update_scheduler()
            self.finished_averaging_round.set()

    @torch.no_grad()
    def _load_local_grads_into_optimizer_(self) -> None:
        for main, offloaded in zip(self.main_parameters, self._optimized_parameters()):
            if main.grad is None:
                offloaded.grad.zero_()
            else:
                offloaded.grad.copy_(main.grad, non_blocking=True)

    @torch.no_grad()
    def _zero_main_grads(self, set_to_none: bool) -> None:
        for param in self.main_parameters:
            if param.grad is not None:
                if set_to_none:
                    param.grad = None
                else:
                    param.grad.zero_()

    @torch.no_grad()
    def _apply_optimizer_parameters_(self) -> None:
        """Copies the offloaded parameters into the trainer's."""
        with self.lock_optimizer:
            for main, offloaded in zip(self.main_parameters, self._optimized_parameters()):
                main.copy_(offloaded, non_blocking=True)

    @torch.no_grad()
    def _load_local_tensors_into_averager_(self) -> None:
        with self.get_tensors() as averaged:
            for local, target in zip(self._local_tensors(), averaged):
                target.copy_(local, non_blocking=True)

    @torch.no_grad()
    def _apply_averaging_results_(self) -> None:
        """The averaged tensors into the local ones (the delta rule keeps local updates
        made while averaging ran)."""
        with self.lock_averaging, self.get_tensors() as averaged:
            local = list(self._local_tensors())
            if self.delta_rule_averaging and self._old_tensors is not None:
                for tensor, new, old in zip(local, averaged, self._old_tensors):
                    tensor.add_(new.to(tensor.device) - old.to(tensor.device))
                self._old_tensors = None
            else:
                for tensor, new in zip(local, averaged):
                    tensor.copy_(new, non_blocking=True)

    def _update_scheduler(self) -> None:
        """Steps the scheduler to the local epoch."""
        if self.scheduler is None:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "lr_scheduler.step() before optimizer.step()"
            while self.scheduler._step_count <= self.local_epoch:
                self.scheduler.step()

    # ------------------------------------------------------------------ state sharing
    def get_current_state(self) -> Tuple[Any, Sequence[torch.Tensor], Sequence[CompressionInfo]]:
        """What a newcomer downloads: the epoch, the parameters (the optimizer's), the
        extra tensors and the optimizer's state."""
        if not self.lock_optimizer.acquire(timeout=30):
            raise TimeoutError("the optimizer stayed busy for 30 s; the state is not shared this time")
        try:
            # Copies taken under the lock: the stream to the newcomer is encoded after it is
            # released, while the next optimizer step may already change the live tensors.
            with torch.no_grad():
                params = [p.detach().to("cpu", copy=True) for p in self._optimized_parameters()]
                extras = [t.detach().to("cpu", copy=True) for t in self.extra_tensors]
                optimizer_metadata, optimizer_tensors = dump_optimizer_state(self.optimizer)
                optimizer_tensors = [t.clone() for t in optimizer_tensors]
        finally:
            self.lock_optimizer.release()
        metadata = dict(epoch=self.local_epoch, group_bits=self.get_group_bits(),
                        optimizer_metadata=optimizer_metadata, num_params=len(params), num_extras=len(extras),
                        scheduler=self._scheduler_state())
        tensors = params + extras + optimizer_tensors
        infos = [CompressionInfo.from_tensor(t, key=i, role=TensorRole.PARAMETER if i < len(params)
                                             else TensorRole.UNSPECIFIED) for i, t in enumerate(tensors)]
        return metadata, tensors, infos

    def _scheduler_state(self) -> Optional[Dict[str, Any]]:
        """The scheduler's state as msgpack takes it (None without one, or when it holds
        other objects): a chainable scheduler (StepLR) computes the next rate from the
        current one, so a loaded rate needs the donor's scheduler beside it."""
        if self.scheduler is None:
            return None
        state = {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"}
        try:
            MSGPackSerializer.dumps(state)
        except TypeError:
            return None
        return state

    def load_state_from_peers(self, wait: bool = True, timeout: Optional[float] = None) -> Optional[bool]:
        """Downloads the most advanced peer's state (parameters, extras, optimizer,
        epoch) and loads it; the scheduler follows the epoch. True when loaded; False
        when no peer shares its state or the donor is behind this peer ("cowardly
        refusing", as hivemind says); ValueError for a state of another model."""
        if not wait:
            raise ValueError("expected wait=True: the state is loaded into the trainer's tensors")
        for pending in list(self.pending_updates):  # delayed work ends before the state changes
            try:
                pending.result()
            except BaseException as e:  # it was logged; the downloaded state replaces it
                logger.debug(f"delayed update failed before loading state: {e!r}")
        self._apply_finished_updates()
        loaded = super().load_state_from_peers(timeout=timeout)
        if loaded is None:
            return False
        metadata, tensors = loaded
        if not isinstance(metadata, dict) or not isinstance(metadata.get("epoch"), int):
            raise ValueError(f"expected a training state with an epoch, got metadata {type(metadata).__name__}")
        if metadata["epoch"] < self.local_epoch:
            logger.warning(f"cowardly refusing to load the state of a peer at epoch {metadata['epoch']}, behind this "
                           f"peer's epoch {self.local_epoch}")
            return False
        n_params, n_extras = len(self.main_parameters), len(self.extra_tensors)
        if metadata.get("num_params") != n_params or metadata.get("num_extras") != n_extras:
            raise ValueError(f"expected a state of {n_params} parameters and {n_extras} extra tensors, got "
                             f"{metadata.get('num_params')} and {metadata.get('num_extras')}")
        params, extras = tensors[:n_params], tensors[n_params:n_params + n_extras]
        for own, new in chain(zip(self.main_parameters, params), zip(self.extra_tensors, extras)):
            if tuple(own.shape) != tuple(new.shape):
                raise ValueError(f"expected a state of this model's shapes, got {tuple(new.shape)} for a tensor of "
                                 f"shape {tuple(own.shape)}")
        with self.lock_optimizer, self.lock_averaging, torch.no_grad():
            load_optimizer_state(self.optimizer, metadata["optimizer_metadata"], tensors[n_params + n_extras:])
            for own, new in zip(self.main_parameters, params):
                own.copy_(new)
            if self.offload_optimizer:
                for own, new in zip(self._optimized_parameters(), params):
                    own.copy_(new)
            for own, new in zip(self.extra_tensors, extras):
                own.copy_(new)
            self.local_epoch = metadata["epoch"]
            if self.scheduler is not None and isinstance(metadata.get("scheduler"), dict):
                state = dict(self.scheduler.state_dict(), **metadata["scheduler"])
                self.scheduler.load_state_dict(state)
            self._update_scheduler()
        return True

    def shutdown(self) -> None:
        """Waits for background work, then stops the averager."""
        for pending in list(self.pending_updates):
            try:
                pending.result(timeout=60)
            except BaseException:
                pass
        self.step_executor.shutdown(wait=False)
        super().shutdown()
