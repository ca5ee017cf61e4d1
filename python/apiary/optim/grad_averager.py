"""apiary.optim.GradientAverager: hivemind's GradientAverager on apiary's averager.

Accumulates the trainer's gradients between averaging rounds (in buffers of its own, or
in the parameters' .grad with reuse_grad_buffers), then averages the accumulated mean
with the group, each peer weighted by the samples it accumulated; the averaged
gradients replace .grad inside use_averaged_gradients(). As hivemind's: a batch
accumulates with weight batch_size / first batch_size of the round, and the sum is
divided by the number of batches accumulated.
"""
import contextlib
import logging
from typing import Any, Iterable, Iterator, Optional, Sequence

import torch

from ..averaging import DecentralizedAverager, StepControl
from ..dht import DHT

logger = logging.getLogger(__name__)


class GradientAverager(DecentralizedAverager):
    """Averages accumulated gradients with peers (hivemind.optim.grad_averager.GradientAverager).

    :param parameters: the model's parameters (their .grad are read, and replaced in
      use_averaged_gradients)
    :param reuse_grad_buffers: accumulate in .grad itself (the trainer does not zero it
      between batches) instead of in buffers of the averager's own
    :param accumulate_grads_on: the device of the own buffers (default: the gradients')
    :param warn: log when accumulators or averaged gradients go unused between rounds
    :param averaged_grads: float32 CPU tensors to average in (default: fresh copies)
    :param kwargs: DecentralizedAverager's options (prefix, target_group_size, ...)
    """

    def __init__(
        self,
        parameters: Iterable[torch.nn.Parameter],
        *,
        dht: DHT,
        prefix: str,
        reuse_grad_buffers: bool = False,
        accumulate_grads_on: Optional[torch.device] = None,
        client_mode: Optional[bool] = None,
        warn: bool = True,
        averaged_grads: Sequence[torch.Tensor] = (),
        **kwargs: Any,
    ):
        if reuse_grad_buffers and accumulate_grads_on is not None:
            logger.warning("accumulate_grads_on has no effect with reuse_grad_buffers=True")
        self.parameters = tuple(parameters)
        if not self.parameters:
            raise ValueError("expected at least one parameter")
        self.reuse_grad_buffers = bool(reuse_grad_buffers)
        self.warn = bool(warn)
        self.local_samples_accumulated = 0
        self.local_times_accumulated = 0
        self._anchor_batch_size: Optional[int] = None
        self._local_accumulators = None
        if not self.reuse_grad_buffers:
            self._local_accumulators = tuple(
                torch.zeros_like(grad, device=accumulate_grads_on) for grad in self._grads_from_parameters())
        self._accumulators_used_in_step = False
        self._new_averaged_grads = False
        with torch.no_grad():
            if not averaged_grads:
                averaged_grads = tuple(grad.detach().float().cpu().clone().contiguous()
                                       for grad in self._grads_from_parameters())
            elif len(averaged_grads) != len(self.parameters) or any(
                    g.size() != a.size() for g, a in zip(self._grads_from_parameters(), averaged_grads)):
                raise ValueError("expected averaged_grads of the parameters' gradients' shapes, one per parameter")
        super().__init__(averaged_tensors=averaged_grads, dht=dht, prefix=prefix, client_mode=client_mode, **kwargs)

    def _grads_from_parameters(self) -> Iterator[torch.Tensor]:
        for param in self.parameters:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            yield param.grad

    @torch.no_grad()
    def _grad_accumulators(self) -> Iterator[torch.Tensor]:
        yield from self._grads_from_parameters() if self.reuse_grad_buffers else self._local_accumulators

    @torch.no_grad()
    def accumulate_grads_(self, batch_size: int) -> None:
        """Adds the current .grad (of a batch of ``batch_size`` samples) to the accumulators."""
        if batch_size <= 0:
            raise ValueError(f"expected batch_size > 0, got {batch_size}")
        if self._accumulators_used_in_step and self.warn:
            logger.warning("[warn=True] the gradient accumulators were not reset since the last averaging round; "
                           "call reset_accumulated_grads_() after each step or step(reset_accumulators=True)")
            self._accumulators_used_in_step = False  # once per round
        if self._anchor_batch_size is None:
            self._anchor_batch_size = batch_size
        self.local_samples_accumulated += batch_size
        self.local_times_accumulated += 1
        if not self.reuse_grad_buffers:  # with reuse, the trainer accumulates in .grad itself
            alpha = float(batch_size) / self._anchor_batch_size
            for grad, accumulator in zip(self._grads_from_parameters(), self._grad_accumulators()):
                accumulator.add_(grad.to(accumulator.device), alpha=alpha)

    def schedule_step(self, scheduled_time: Optional[float] = None, **kwargs: Any) -> StepControl:
        """Starts matchmaking for a round that begins its all-reduce once step() is called
        with the returned control (weight is set then)."""
        if kwargs.get("weight") is not None:
            raise ValueError("expected no weight in schedule_step; step() sets it from the samples accumulated")
        kwargs.pop("weight", None)
        return super().step(scheduled_time=scheduled_time, wait=False, require_trigger=True, **kwargs)

    def step(
        self,
        weight: Optional[float] = None,
        reset_accumulators: bool = True,
        control: Optional[StepControl] = None,
        timeout: Optional[float] = None,
        wait: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Averages the accumulated gradients with the group (weight: the samples accumulated).

        :param control: a round from schedule_step (default: one scheduled now)
        :param reset_accumulators: zero the accumulators once loaded into the averager
        :param wait: return the group's gathered data, or the StepControl at once
        """
        if control is None:
            control = self.schedule_step(timeout=timeout, **kwargs)
        elif kwargs:
            raise RuntimeError(f"a pre-scheduled round ignores {sorted(kwargs)}; pass them to schedule_step")
        if control.triggered:
            raise RuntimeError("expected a StepControl not used yet, but this one was triggered already")
        if self._new_averaged_grads and self.warn:
            logger.warning("[warn=True] starting a new averaging round, but the last round's gradients were not used")
        self.load_accumulators_into_averager_()
        self._accumulators_used_in_step = True
        self._new_averaged_grads = True
        control.weight = self.local_samples_accumulated if weight is None else weight
        if reset_accumulators:
            self.reset_accumulated_grads_()
        control.allow_allreduce()
        return control.result(timeout) if wait else control

    @torch.no_grad()
    def load_accumulators_into_averager_(self) -> None:
        """Puts the accumulated mean (sum / batches accumulated) into the averaged tensors."""
        scale = 1.0 / self.local_times_accumulated if self.local_times_accumulated else 0.0
        with self.get_tensors() as averaged:
            for accumulator, target in zip(self._grad_accumulators(), averaged):
                target.copy_(accumulator).mul_(scale)

    @torch.no_grad()
    def reset_accumulated_grads_(self) -> None:
        """Zeroes the accumulators and the counts."""
        self._accumulators_used_in_step = False
        self.local_samples_accumulated = self.local_times_accumulated = 0
        self._anchor_batch_size = None
        for accumulator in self._grad_accumulators():
            accumulator.zero_()

    @contextlib.contextmanager
    def use_averaged_gradients(self) -> Iterator[Sequence[torch.Tensor]]:
        """The averaged gradients as the parameters' .grad inside the block (the old .grad after)."""
        self._new_averaged_grads = False
        with torch.no_grad(), self.get_tensors() as averaged:
            old = [param.grad for param in self.parameters]
            try:
                for param, grad in zip(self.parameters, averaged):
                    param.grad = grad
                yield averaged
            finally:
                for param, grad in zip(self.parameters, old):
                    param.grad = grad

    def notify_used_averaged_gradients(self) -> None:
        """The last round's gradients were used (no warning at the next round)."""
        self._new_averaged_grads = False
