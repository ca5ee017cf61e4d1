"""apiary.Optimizer: hivemind's collaborative Optimizer on apiary's averagers and tracker.

Peers of different speeds train one model: each accumulates gradients locally and
reports its samples through the ProgressTracker; once the swarm has accumulated
``target_batch_size`` samples (an epoch), the peers average their gradients (weighted by
samples), each runs the optimizer step with the average, and every
``average_state_every`` epochs they average parameters and optimizer statistics. A peer
that falls behind the swarm's epoch downloads the state of the most advanced peer.
With ``use_local_updates`` the optimizer steps after every batch and only the state is
averaged at epoch boundaries.

Differences from hivemind: ``client_mode`` is taken as given (hivemind replaces an
explicit value by the DHT's flag); ``grad_scaler`` is refused (no loss scaling here).
"""
import logging
import time
from functools import partial
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Union

import torch

from .. import _apiary
from ..averaging import StepControl
from ..compression import CompressionBase, NoCompression
from ..dht import DHT
from ..timed import get_dht_time
from .grad_averager import GradientAverager
from .progress_tracker import ProgressTracker
from .state_averager import OptimizerFactory, SchedulerFactory, TrainingStateAverager

logger = logging.getLogger(__name__)


class Optimizer(torch.optim.Optimizer):
    """Collaborative training with peers (hivemind.Optimizer; arguments and defaults are its).

    :param dht: a running apiary.DHT
    :param run_id: the experiment's name: peers with the same run_id train together
    :param target_batch_size: samples the swarm accumulates per epoch (one optimizer step)
    :param batch_size_per_step: samples of each step() call (or pass batch_size to step)
    :param optimizer: a torch optimizer, or a factory of one from params
    :param params: the parameters (needed with a factory)
    :param scheduler: an LR scheduler or factory, stepped once per epoch
    :param matchmaking_time: seconds before an epoch's end when groups are looked for
    :param averaging_timeout: seconds an averaging round may take before it is given up
    :param load_state_timeout: seconds to wait for a donor's state
    :param average_state_every: average parameters and statistics every N epochs
    :param use_local_updates: step the optimizer after every batch; average only the state
    :param client_mode: send, never serve (a peer that cannot accept connections);
      default: the DHT's
    :param auxiliary: help averaging without training (weight 0, needs no batches)
    :param grad_compression, state_averaging_compression, load_state_compression: codecs
    :param delay_optimizer_step: run the optimizer step in the background (needs
      offload_optimizer); the parameters change at a later step()
    :param delay_grad_averaging: average gradients in the background too
    :param delay_state_averaging: average the state in the background (default)
    :param offload_optimizer: the optimizer runs on float32 CPU copies of the parameters
      (default: when ``params`` are given and local updates are off)
    :param reuse_grad_buffers: accumulate in .grad (do not call zero_grad then)
    :param average_opt_statistics: optimizer statistics averaged with the parameters
    :param extra_tensors: other tensors averaged and shared (e.g. batch-norm buffers)
    :param averager_opts: DecentralizedAverager options for both averagers
    :param tracker_opts: ProgressTracker options
    """

    def __init__(
        self,
        *,
        dht: DHT,
        run_id: str,
        target_batch_size: int,
        batch_size_per_step: Optional[int] = None,
        optimizer: Union[torch.optim.Optimizer, OptimizerFactory],
        params: Optional[Iterable[Any]] = None,
        scheduler: Optional[Union[Any, SchedulerFactory]] = None,
        matchmaking_time: Optional[float] = 15.0,
        averaging_timeout: Optional[float] = 60.0,
        allreduce_timeout: Optional[float] = None,
        next_chunk_timeout: Optional[float] = None,
        load_state_timeout: float = 600.0,
        reuse_grad_buffers: bool = False,
        offload_optimizer: Optional[bool] = None,
        delay_optimizer_step: Optional[bool] = None,
        delay_grad_averaging: bool = False,
        delay_state_averaging: bool = True,
        average_state_every: int = 1,
        use_local_updates: bool = False,
        client_mode: Optional[bool] = None,
        auxiliary: bool = False,
        grad_compression: CompressionBase = NoCompression(),
        state_averaging_compression: CompressionBase = NoCompression(),
        load_state_compression: CompressionBase = NoCompression(),
        average_opt_statistics: Sequence[str] = (),
        extra_tensors: Sequence[torch.Tensor] = (),
        averager_opts: Optional[Dict[str, Any]] = None,
        tracker_opts: Optional[Dict[str, Any]] = None,
        grad_averager_factory: Optional[Callable[..., GradientAverager]] = None,
        performance_ema_alpha: float = 0.1,
        shutdown_timeout: float = 5,
        verbose: bool = False,
    ):
        if not isinstance(dht, DHT) or not dht.is_alive():
            raise ValueError("expected a running apiary.DHT")
        if not run_id or not isinstance(run_id, str):
            raise ValueError(f"expected a run_id string, got {run_id!r}")
        if int(target_batch_size) <= 0:
            raise ValueError(f"expected target_batch_size > 0, got {target_batch_size}")
        if batch_size_per_step is not None and int(batch_size_per_step) <= 0:
            raise ValueError(f"expected batch_size_per_step > 0, got {batch_size_per_step}")
        if int(average_state_every) < 1:
            raise ValueError(f"expected average_state_every >= 1, got {average_state_every}")
        client_mode = dht.client_mode if client_mode is None else bool(client_mode)
        if auxiliary and client_mode:
            raise ValueError("expected an auxiliary peer that is not in client mode: it serves averaging")
        if auxiliary and batch_size_per_step is not None:
            raise ValueError("expected no batch_size_per_step for an auxiliary peer: it does not train")
        optimizer_is_factory = callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer)
        if optimizer_is_factory and params is None:
            raise ValueError("expected params with an optimizer factory")
        if not optimizer_is_factory and params is not None:
            raise ValueError("expected params only with an optimizer factory; a made optimizer has its own")
        if offload_optimizer is None:
            offload_optimizer = params is not None and not use_local_updates
        if delay_optimizer_step is None:
            delay_optimizer_step = delay_grad_averaging
        if delay_grad_averaging and not delay_optimizer_step:
            raise ValueError("expected delay_optimizer_step with delay_grad_averaging: the step waits for the average")
        if delay_optimizer_step and not offload_optimizer:
            raise ValueError("expected offload_optimizer=True with a delayed optimizer step: it runs on copies of "
                             "the parameters while the trainer computes the next gradients")
        if use_local_updates and (delay_grad_averaging or reuse_grad_buffers):
            raise ValueError("expected neither delay_grad_averaging nor reuse_grad_buffers with use_local_updates: "
                             "no gradients are averaged")
        if use_local_updates and offload_optimizer:
            raise ValueError("expected offload_optimizer=False with use_local_updates: the optimizer steps locally")

        self.dht, self.run_id, self.client_mode, self.auxiliary = dht, run_id, client_mode, bool(auxiliary)
        self.target_batch_size = int(target_batch_size)
        self.batch_size_per_step = None if batch_size_per_step is None else int(batch_size_per_step)
        self.matchmaking_time = float(matchmaking_time if matchmaking_time is not None else 15.0)
        self.averaging_timeout = None if averaging_timeout is None else float(averaging_timeout)
        self.load_state_timeout = float(load_state_timeout)
        self.delay_before_state_averaging = 0.0
        self.offload_optimizer, self.reuse_grad_buffers = bool(offload_optimizer), bool(reuse_grad_buffers)
        self.delay_optimizer_step, self.delay_grad_averaging = bool(delay_optimizer_step), bool(delay_grad_averaging)
        self.delay_state_averaging = bool(delay_state_averaging)
        self.average_state_every, self.use_local_updates = int(average_state_every), bool(use_local_updates)
        self.shutdown_timeout, self.verbose = float(shutdown_timeout), bool(verbose)
        self.status_loglevel = logging.INFO if verbose else logging.DEBUG
        self.scheduled_grads: Optional[StepControl] = None
        self.scheduled_state: Optional[StepControl] = None
        self._grads_in_flight: Optional[StepControl] = None  # a delayed gradient round
        self._should_check_synchronization_on_update = True
        self._shut_down = False

        if next_chunk_timeout is None:  # hivemind's defaults
            next_chunk_timeout = self.matchmaking_time
        if allreduce_timeout is None:
            allreduce_timeout = self.averaging_timeout
        opts = dict(averager_opts or {})
        common = dict(dht=dht, client_mode=client_mode, auxiliary=self.auxiliary,
                      min_matchmaking_time=self.matchmaking_time, allreduce_timeout=allreduce_timeout,
                      next_chunk_timeout=next_chunk_timeout, start=True, **opts)
        self.state_averager = TrainingStateAverager(
            optimizer=optimizer, params=params, scheduler=scheduler, offload_optimizer=self.offload_optimizer,
            custom_gradients=self.offload_optimizer, reuse_tensors=None if not use_local_updates else False,
            delta_rule_averaging=self.use_local_updates and self.delay_state_averaging,
            average_opt_statistics=average_opt_statistics, extra_tensors=extra_tensors,
            performance_ema_alpha=performance_ema_alpha, status_loglevel=self.status_loglevel,
            prefix=f"{run_id}_state_averager", compression=state_averaging_compression,
            state_compression=load_state_compression, **common)
        self.grad_averager: Optional[GradientAverager] = None
        if not self.use_local_updates:
            factory = grad_averager_factory or GradientAverager
            averaged_grads = ()
            if self.offload_optimizer:  # the average lands in the offloaded optimizer's gradients
                averaged_grads = tuple(p.grad for p in self.state_averager._optimized_parameters())
            self.grad_averager = factory(
                self.state_averager.main_parameters, prefix=f"{run_id}_grad_averager",
                reuse_grad_buffers=self.reuse_grad_buffers, compression=grad_compression,
                averaged_grads=averaged_grads, allow_state_sharing=False, **common)
        self.tracker = ProgressTracker(dht, run_id, self.target_batch_size, client_mode=client_mode,
                                       performance_ema_alpha=performance_ema_alpha, **dict(tracker_opts or {}))
        if not self.auxiliary:
            self._declare_epoch()
        # torch.optim.Optimizer's attributes, so schedulers and tools see the inner optimizer's groups
        self.defaults = self.state_averager.optimizer.defaults

    # ------------------------------------------------------------------ torch.optim.Optimizer surface
    @property
    def opt(self) -> torch.optim.Optimizer:
        return self.state_averager.optimizer

    @property
    def param_groups(self):  # type: ignore[override]
        return self.opt.param_groups

    @property
    def state(self):  # type: ignore[override]
        return self.opt.state

    @property
    def local_epoch(self) -> int:
        """This peer's epoch: the number of optimizer steps of the swarm it took part in."""
        return self.state_averager.local_epoch

    @property
    def use_averaged_gradients(self) -> bool:
        return not self.use_local_updates

    def __repr__(self) -> str:
        return f"{type(self).__name__}(run_id={self.run_id!r}, local_epoch={self.local_epoch}, opt={self.opt!r})"

    def state_dict(self) -> Dict[str, Any]:
        """The inner optimizer's state dict, with the epoch."""
        state = self.opt.state_dict()
        state["state"]["local_epoch"] = self.local_epoch
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        state_dict["state"] = dict(state_dict["state"])
        epoch = state_dict["state"].pop("local_epoch", None)
        if epoch is not None:
            self.state_averager.local_epoch = int(epoch)
            self.state_averager._update_scheduler()
        self.opt.load_state_dict(state_dict)

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        raise ValueError("expected the parameters at construction: apiary.Optimizer averages a fixed set of tensors")

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zeroes the parameters' gradients (not with reuse_grad_buffers: they are the accumulators)."""
        if self.reuse_grad_buffers:
            raise ValueError("expected no zero_grad with reuse_grad_buffers=True: the gradients accumulate in .grad "
                             "and are zeroed after each epoch")
        for param in self.state_averager.main_parameters:
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                param.grad.detach_()
                param.grad.zero_()

    # ------------------------------------------------------------------ training
    def step(self, closure: Optional[Callable[[], Any]] = None, batch_size: Optional[int] = None,
             grad_scaler: Any = None) -> Any:
        """Accumulates this batch's gradients (or, with local updates, steps the
        optimizer) and reports progress; at the swarm's epoch boundary, averages and
        steps. A peer that fell behind loads the state of peers instead (this batch's
        gradients are dropped: they were computed on old parameters).

        :param closure: recomputes the loss (called with gradients enabled)
        :param batch_size: samples in this batch (default: batch_size_per_step)
        """
        if self._shut_down:
            raise RuntimeError("expected a running optimizer, but it was shut down")
        if grad_scaler is not None:
            raise ValueError("expected grad_scaler=None: apiary's optimizer has no loss scaling")
        if self.auxiliary and (closure is not None or batch_size is not None):
            raise ValueError("expected neither closure nor batch_size for an auxiliary peer: it does not train")
        if not self.auxiliary and batch_size is None and self.batch_size_per_step is None:
            raise ValueError("expected batch_size: the optimizer has no batch_size_per_step")
        batch_size = batch_size if batch_size is not None else self.batch_size_per_step
        if batch_size is not None and int(batch_size) <= 0:
            raise ValueError(f"expected batch_size > 0, got {batch_size}")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        if not self.auxiliary and self._should_load_state_from_peers():
            logger.log(self.status_loglevel, f"{self.run_id}: behind the swarm (epoch {self.local_epoch} < "
                                             f"{self.tracker.global_epoch}); loading the state of peers")
            self.load_state_from_peers()
            return loss

        if self.use_local_updates:
            self.state_averager.step(apply_delayed_updates=True, optimizer_step=True, delay_optimizer_step=False,
                                     averaging_round=False, wait_for_delayed_updates=False)
        elif not self.auxiliary:
            self.grad_averager.accumulate_grads_(batch_size=int(batch_size))

        if not self.auxiliary:
            self.tracker.report_local_progress(self.local_epoch, self._samples_accumulated(int(batch_size)))
        self._maybe_schedule_gradient_averaging()
        self._maybe_schedule_state_averaging()
        if self.tracker.ready_to_update_epoch:
            self._update_global_epoch()
        return loss

    def _samples_accumulated(self, batch_size: int) -> int:
        if self.use_local_updates:
            self._local_samples = getattr(self, "_local_samples", 0) + batch_size
            return self._local_samples
        return self.grad_averager.local_samples_accumulated

    def _update_global_epoch(self) -> None:
        """The swarm reached its epoch: average gradients (or use the local ones),
        step, average the state when it is due, and move to the next epoch."""
        with self.tracker.pause_updates():
            wait_for_trigger = None
            if self.offload_optimizer and self.state_averager.pending_updates:
                # The last epoch's delayed step reads the offloaded gradients, which are the
                # gradient averager's tensors: it ends before this epoch's are loaded there.
                for pending in list(self.state_averager.pending_updates):
                    try:
                        pending.result()
                    except Exception as e:  # logged by the state averager; this epoch goes on
                        logger.debug(f"{self.run_id}: the last delayed step failed: {e!r}")
            if not self.use_local_updates:
                control = self._begin_averaging_gradients()
                if control is None:  # alone, or could not begin: the local gradients
                    self.grad_averager.load_accumulators_into_averager_()
                    self.grad_averager.reset_accumulated_grads_()
                    self._load_averaged_gradients_into_optimizer()
                elif self.delay_grad_averaging:
                    wait_for_trigger = partial(self._average_gradients_and_load_into_optimizer, control)
                    self._grads_in_flight = control
                else:
                    self._average_gradients_and_load_into_optimizer(control)

            next_epoch = _apiary.epoch_next(self.local_epoch, self.tracker.global_epoch)
            should_step = not self.auxiliary and not self.use_local_updates
            should_average_state = (_apiary.epoch_should_average_state(
                next_epoch, self.average_state_every, self.tracker.global_progress.num_peers)
                and not self.state_averager.averaging_in_progress)
            scheduled, self.scheduled_state = self.scheduled_state, None
            if scheduled is not None and (scheduled.triggered or scheduled.done()):
                scheduled = None
            if not should_average_state and scheduled is not None:
                scheduled.cancel()
                scheduled = None
            self.state_averager.step(
                increment_epoch=True, wait_for_trigger=wait_for_trigger, optimizer_step=should_step,
                delay_optimizer_step=self.delay_optimizer_step and should_step,
                averaging_round=should_average_state,
                delay_averaging=self.delay_state_averaging and not self.auxiliary,
                averaging_control=scheduled,
                averaging_opts=dict(timeout=self.averaging_timeout) if should_average_state else None)
            if self.auxiliary and self.local_epoch < self.tracker.global_epoch:
                self.state_averager.local_epoch = self.tracker.global_epoch  # an auxiliary peer never loads state
            self.tracker.update_epoch(new_epoch=self.local_epoch)
            self._local_samples = 0
            self._should_check_synchronization_on_update = True
            if not self.auxiliary:
                self._declare_epoch()
        logger.log(self.status_loglevel, f"{self.run_id}: epoch {self.local_epoch}")

    def _declare_epoch(self) -> None:
        """Newcomers ask donors in order of epoch; a busy averager only delays the declaration."""
        try:
            self.state_averager.state_sharing_priority = self.local_epoch
        except (TimeoutError, RuntimeError) as e:
            logger.warning(f"{self.run_id}: epoch {self.local_epoch} not declared to newcomers yet: {e!r}")

    def _begin_averaging_gradients(self) -> Optional[StepControl]:
        """Starts the gradients' all-reduce (a pre-scheduled round, or one scheduled now);
        None when this peer is alone or the round could not begin."""
        control, self.scheduled_grads = self.scheduled_grads, None
        if self.tracker.global_progress.num_peers <= 1:
            if control is not None and not control.done():
                control.cancel()
            return None
        try:
            if control is None or control.triggered or control.done():
                control = self.grad_averager.schedule_step(timeout=self.averaging_timeout)
            self.grad_averager.step(control=control, reset_accumulators=True, wait=False)
            return control
        except Exception as e:
            logger.warning(f"{self.run_id}: could not begin averaging gradients, using the local ones: {e!r}")
            if control is not None and not control.done():
                control.cancel()
            return None

    def _average_gradients_and_load_into_optimizer(self, control: StepControl) -> None:
        try:
            control.result(self.averaging_timeout)
        except BaseException as e:  # the averaged tensors still hold this peer's own mean
            logger.warning(f"{self.run_id}: averaging gradients failed, using the local ones: {e!r}")
        self._load_averaged_gradients_into_optimizer()

    @torch.no_grad()
    def _load_averaged_gradients_into_optimizer(self) -> None:
        if self.offload_optimizer:
            self.grad_averager.notify_used_averaged_gradients()  # they are the offloaded gradients
            return
        with self.grad_averager.use_averaged_gradients() as averaged:
            grads = [g.clone() for g in averaged]
        for param, grad in zip(self.state_averager._optimized_parameters(), grads):
            if param.grad is None:
                param.grad = grad.to(param.device, param.dtype)
            else:
                param.grad.copy_(grad)

    def _maybe_schedule_gradient_averaging(self) -> None:
        if self.use_local_updates:
            return
        if self._grads_in_flight is not None and not self._grads_in_flight.done():
            return  # the last epoch's round still runs in the background (delay_grad_averaging)
        eta = self.tracker.estimated_next_update_time - get_dht_time()
        scheduled = self.scheduled_grads is not None and not (self.scheduled_grads.triggered or
                                                              self.scheduled_grads.done())
        if _apiary.epoch_should_schedule(eta, self.matchmaking_time, self.tracker.global_progress.num_peers, scheduled):
            scheduled_time = get_dht_time() + max(eta, 0.0)
            self.scheduled_grads = self.grad_averager.schedule_step(scheduled_time, timeout=self.averaging_timeout)
            logger.debug(f"{self.run_id}: gradient averaging scheduled in {max(eta, 0.0):.2f} s")

    def _maybe_schedule_state_averaging(self) -> None:
        next_epoch = _apiary.epoch_next(self.local_epoch, self.tracker.global_epoch)
        if next_epoch % self.average_state_every != 0 or self.state_averager.pending_updates:
            return  # not this epoch, or the last epoch's delayed step or round still runs
        eta = self.tracker.estimated_next_update_time - get_dht_time() + self.delay_before_state_averaging
        scheduled = self.scheduled_state is not None and not (self.scheduled_state.triggered or
                                                              self.scheduled_state.done())
        if _apiary.epoch_should_schedule(eta, self.matchmaking_time, self.tracker.global_progress.num_peers, scheduled):
            scheduled_time = get_dht_time() + max(eta, 0.0)
            self.scheduled_state = self.state_averager.schedule_step(
                scheduled_time, gather=next_epoch, timeout=self.averaging_timeout)
            logger.debug(f"{self.run_id}: state averaging scheduled in {max(eta, 0.0):.2f} s")

    # ------------------------------------------------------------------ catching up
    def _should_load_state_from_peers(self) -> bool:
        """Once per epoch after a fresh read of the swarm: any other epoch than the
        swarm's; otherwise: more than one epoch behind."""
        check_sync = self._should_check_synchronization_on_update
        fetched = check_sync and self.tracker.fetched_global_progress_this_epoch.is_set()
        if fetched:
            self._should_check_synchronization_on_update = False
        return _apiary.epoch_should_load_state(self.local_epoch, self.tracker.global_epoch, check_sync, fetched)

    def load_state_from_peers(self, **kwargs: Any) -> bool:
        """Downloads the most advanced peer's state (parameters, optimizer, epoch),
        retrying until load_state_timeout; True when a state was loaded."""
        self._cancel_scheduled()
        loaded = False
        with self.tracker.pause_updates():
            deadline = time.monotonic() + self.load_state_timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    logger.warning(f"{self.run_id}: no state loaded within {self.load_state_timeout} s")
                    break
                try:
                    loaded = bool(self.state_averager.load_state_from_peers(timeout=min(left, 60.0), **kwargs))
                    break
                except KeyboardInterrupt:
                    raise
                except BaseException as e:
                    logger.warning(f"{self.run_id}: loading the state of peers failed, retrying: {e!r}")
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            if self.tracker.global_epoch - 1 <= self.local_epoch < self.tracker.global_epoch:
                logger.log(self.status_loglevel, f"{self.run_id}: catching up with epoch {self.tracker.global_epoch}")
                self.state_averager.local_epoch = self.tracker.global_epoch
                self.state_averager._update_scheduler()
            self.tracker.report_local_progress(local_epoch=self.local_epoch, samples_accumulated=0)
            self._local_samples = 0
            if self.grad_averager is not None:
                self.grad_averager.reset_accumulated_grads_()
            if not self.auxiliary:
                self._declare_epoch()
        self._should_check_synchronization_on_update = False
        return loaded

    def _cancel_scheduled(self) -> None:
        for control in (self.scheduled_grads, self.scheduled_state):
            if control is not None and not control.done():
                control.cancel()
        self.scheduled_grads = self.scheduled_state = None

    def shutdown(self) -> None:
        """Leaves the swarm: cancels scheduled rounds, finishes background work, stops."""
        if self._shut_down:
            return
        self._shut_down = True
        self._cancel_scheduled()
        self.tracker.shutdown(self.shutdown_timeout)
        self.state_averager.step(wait_for_delayed_updates=True)
        self.state_averager.shutdown()
        if self.grad_averager is not None:
            self.grad_averager.shutdown()

    def __del__(self) -> None:
        try:
            if not self._shut_down and self.dht.is_alive():
                self.shutdown()
        except Exception:
            pass
