"""apiary.optim.DiLoCo: local training with rare, compressed averaging (Douillard et al.,
"DiLoCo: Distributed Low-Communication Training of Language Models", 2023).

Each peer runs ``inner_steps`` (H) steps of its inner optimizer on its own data; then the
peers average their pseudo-gradients (the round's start parameters minus the local ones)
with any codec, and each applies the average with an outer Nesterov SGD (DiLoCo's lr 0.7,
momentum 0.9) to the round's start parameters, which become the next round's. Traffic
falls H-fold against averaging every step, and 8-bit codecs cut it four times more. A
round that finds no group takes no outer step (the local steps go into the next round),
so the outer parameters move only together; rounds are rare, so give matchmaking time
(``matchmaking_time``) for every peer to arrive, and ``target_group_size`` the swarm's
size to start as soon as all have.

A group steps only while no peer declares a later round (to newcomers, through the DHT)
and when its members at its round are a strict majority of the swarm (the peers at that
round or behind it): when matchmaking splits a round into groups, at most one of them
steps, and the others keep their local steps for the next round (``deferred_rounds``
counts them), find themselves behind and load the swarm's state, so one round has one
outer state. Groups smaller than half the swarm (a ``target_group_size`` below it) never
step.

``streaming=True`` overlaps a round's averaging with the next H inner steps: the average
is applied one round late, and the local progress made meanwhile is kept on top of it.

Every peer of a round ends it with the same bits (the averager's identical_results:
each reducer sends its average encoded once and applies what it sent to its own part),
so the peers that took part hold bit-identical outer parameters after every outer step.
A newcomer (or a peer whose group was ahead of it) loads the outer state (parameters,
outer momentum, round) of the most advanced peer.
"""
import logging
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from ..averaging import DecentralizedAverager, StepControl
from ..compression import CompressionBase, CompressionInfo, NoCompression, TensorRole
from ..dht import DHT
from ..peer_id import PeerID

logger = logging.getLogger(__name__)


def _declared_peer(subkey: Any) -> Any:
    """The PeerID of a state-sharing declaration (its subkey: the donor's address)."""
    if isinstance(subkey, bytes):
        try:
            return PeerID.from_multiaddr(subkey.decode())
        except (UnicodeDecodeError, ValueError, RuntimeError):
            pass
    return subkey


class _OuterAverager(DecentralizedAverager):
    """Averages pseudo-gradients; shares the outer state with newcomers."""

    def __init__(self, owner: "DiLoCo", *args: Any, **kwargs: Any):
        self._owner = owner
        super().__init__(*args, **kwargs)

    def get_current_state(self) -> Tuple[Any, Sequence[torch.Tensor], Sequence[CompressionInfo]]:
        return self._owner._outer_state()


class DiLoCo:
    """DiLoCo over apiary's averager: ``step()`` after each backward pass.

    :param dht: a running apiary.DHT
    :param run_id: peers with the same run_id train together
    :param params: the model's parameters
    :param inner_optimizer: a torch optimizer of ``params``, or a factory of one
    :param inner_steps: H, the local steps between averaging rounds
    :param outer_lr, outer_momentum, nesterov: the outer SGD (DiLoCo: 0.7, 0.9, True)
    :param compression: the codec of the pseudo-gradients (e.g. Uniform8BitQuantization())
    :param streaming: average in the background during the next H steps, apply one round late
    :param matchmaking_time: seconds a round looks for its group
    :param averaging_timeout: seconds a round may take before this peer goes on alone
    :param target_group_size, min_group_size, client_mode: the averager's
    :param load_state_timeout: seconds to wait for a donor's outer state
    :param averager_opts: other DecentralizedAverager options
    """

    def __init__(
        self,
        *,
        dht: DHT,
        run_id: str,
        params: Iterable[torch.Tensor],
        inner_optimizer: Union[torch.optim.Optimizer, Callable[[List[torch.Tensor]], torch.optim.Optimizer]],
        inner_steps: int = 500,
        outer_lr: float = 0.7,
        outer_momentum: float = 0.9,
        nesterov: bool = True,
        compression: CompressionBase = NoCompression(),
        streaming: bool = False,
        matchmaking_time: float = 5.0,
        averaging_timeout: float = 60.0,
        target_group_size: Optional[int] = None,
        min_group_size: int = 2,
        client_mode: Optional[bool] = None,
        load_state_timeout: float = 600.0,
        averager_opts: Optional[Dict[str, Any]] = None,
    ):
        if not isinstance(dht, DHT) or not dht.is_alive():
            raise ValueError("expected a running apiary.DHT")
        if not run_id or not isinstance(run_id, str):
            raise ValueError(f"expected a run_id string, got {run_id!r}")
        if int(inner_steps) < 1:
            raise ValueError(f"expected inner_steps >= 1, got {inner_steps}")
        if not (outer_lr > 0) or not (0 <= outer_momentum < 1):
            raise ValueError(f"expected outer_lr > 0 and 0 <= outer_momentum < 1, got {outer_lr}, {outer_momentum}")
        self.params = [p for p in params]
        if not self.params or not all(isinstance(p, torch.Tensor) for p in self.params):
            raise ValueError("expected the model's parameters (tensors)")
        if callable(inner_optimizer) and not isinstance(inner_optimizer, torch.optim.Optimizer):
            inner_optimizer = inner_optimizer(self.params)
        if not isinstance(inner_optimizer, torch.optim.Optimizer):
            raise TypeError(f"expected a torch optimizer or a factory of one, got {type(inner_optimizer).__name__}")
        self.inner = inner_optimizer
        self.run_id, self.inner_steps, self.streaming = run_id, int(inner_steps), bool(streaming)
        self.averaging_timeout, self.load_state_timeout = float(averaging_timeout), float(load_state_timeout)
        with torch.no_grad():
            # The outer parameters (the round's start) and the outer optimizer on them.
            self.outer_params = [p.detach().to("cpu", torch.float32, copy=True).contiguous() for p in self.params]
            self._pseudo = [torch.zeros_like(t) for t in self.outer_params]  # what the peers average
        self.outer = torch.optim.SGD(self.outer_params, lr=float(outer_lr), momentum=float(outer_momentum),
                                     nesterov=bool(nesterov))
        for t in self.outer_params:  # the momentum buffers exist from the start (they are shared)
            self.outer.state[t]["momentum_buffer"] = torch.zeros_like(t)
        self.local_epoch = 0  # outer steps taken
        self.inner_step_count = 0
        self.deferred_rounds = 0  # rounds averaged by a group without a majority of the swarm: no outer step
        self._pending: Optional[Tuple[StepControl, List[torch.Tensor]]] = None  # streaming: the round in flight
        self._lock = threading.Lock()
        self.averager = _OuterAverager(
            self, self._pseudo, dht, start=True, prefix=f"{run_id}_diloco", compression=compression,
            min_matchmaking_time=float(matchmaking_time), target_group_size=target_group_size,
            min_group_size=int(min_group_size), client_mode=client_mode, identical_results=True,
            **dict(averager_opts or {}))
        self.averager.state_sharing_priority = self.local_epoch

    # ------------------------------------------------------------------ training
    def zero_grad(self, set_to_none: bool = False) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One inner step; every inner_steps steps, an outer round."""
        loss = self.inner.step(closure)
        self.inner_step_count += 1
        if self.inner_step_count % self.inner_steps == 0:
            if self.streaming:
                self._streaming_round()
            else:
                self._round()
        return loss

    @torch.no_grad()
    def _load_pseudo_gradient(self) -> None:
        with self.averager.get_tensors() as pseudo:
            for target, start, param in zip(pseudo, self.outer_params, self.params):
                target.copy_(start - param.detach().to("cpu", torch.float32))

    def _average(self, wait: bool) -> Any:
        return self.averager.step(gather=self.local_epoch, timeout=self.averaging_timeout, wait=wait)

    def _round(self) -> None:
        """Averages the pseudo-gradients now and takes the outer step."""
        self._load_pseudo_gradient()
        try:
            gathered = self._average(wait=True)
        except Exception as e:  # no outer step alone: the local steps go on and join the next round
            logger.warning(f"{self.run_id}: DiLoCo round {self.local_epoch} not averaged ({e!r}); the local "
                           "steps go into the next round")
            self._catch_up_if_behind()
            return
        if self._behind(gathered) or not self._whole_round():
            return
        if not self._majority(gathered):  # another group of this round may have stepped: its state then
            self._catch_up_if_behind()
            return
        with torch.no_grad():
            self._outer_step(self._averaged())
            for param, start in zip(self.params, self.outer_params):
                param.copy_(start)

    def _streaming_round(self) -> None:
        """Applies the round in flight (one round late), keeping the progress made since,
        then starts averaging this round's pseudo-gradient."""
        with torch.no_grad():
            if self._pending is not None:
                control, at_start = self._pending
                self._pending = None
                try:
                    gathered = control.result(self.averaging_timeout)
                except Exception as e:  # no outer step: the local steps join the next round
                    logger.warning(f"{self.run_id}: DiLoCo round {self.local_epoch} not averaged ({e!r}); the "
                                   "local steps go into the next round")
                    gathered = None
                    if self._catch_up_if_behind():
                        return
                if gathered is not None and self._whole_round():
                    if self._behind(gathered):
                        return
                    if not self._majority(gathered):
                        if self._catch_up_if_behind():
                            return
                    else:
                        self._outer_step(self._averaged())
                        # The local steps since the round began, on top of the new outer parameters.
                        for param, start, began in zip(self.params, self.outer_params, at_start):
                            param.add_(start.to(param.device) - began.to(param.device))
            self._load_pseudo_gradient()
            at_start = [p.detach().clone() for p in self.params]
            try:
                self._pending = (self._average(wait=False), at_start)
            except Exception as e:
                logger.warning(f"{self.run_id}: could not start DiLoCo round {self.local_epoch}: {e!r}")

    @torch.no_grad()
    def _averaged(self) -> List[torch.Tensor]:
        """A copy of the averaged pseudo-gradients, taken under the averager's lock (which a
        newcomer's download takes too: nothing slow happens while it is held)."""
        with self.averager.get_tensors() as average:
            return [t.clone() for t in average]

    def _declare_round(self) -> None:
        """Donors are asked in order of round; a slow averager only delays the declaration."""
        try:
            self.averager.state_sharing_priority = self.local_epoch
        except (TimeoutError, RuntimeError) as e:
            logger.warning(f"{self.run_id}: round {self.local_epoch} not declared to newcomers yet: {e!r}")

    def _outer_step(self, average: Sequence[torch.Tensor]) -> None:
        with self._lock:
            for start, grad in zip(self.outer_params, average):
                start.grad = grad.clone()
            self.outer.step()
            for start in self.outer_params:
                start.grad = None
            self.local_epoch += 1
        self._declare_round()

    def _catch_up_if_behind(self) -> bool:
        """After a round without a group: if a peer declares a later round (its state
        sharing priority), load the swarm's state rather than wait for a group that moved
        on. True when a state was loaded."""
        try:
            found = self.averager.dht.get(f"{self.averager.prefix}.all_averagers", latest=True)
        except Exception as e:  # the DHT is going down: nothing to catch up with
            logger.debug(f"{self.run_id}: could not read the swarm's rounds: {e!r}")
            return False
        rounds = [v.value for v in (found.value.values() if found and isinstance(found.value, dict) else [])
                  if isinstance(v.value, (int, float))]
        if rounds and max(rounds) > self.local_epoch:
            logger.info(f"{self.run_id}: peers are at round {int(max(rounds))}, this peer at {self.local_epoch}; "
                        "loading the swarm's state")
            return self.load_state_from_peers()
        return False

    def _whole_round(self) -> bool:
        """Every part of this peer's round came back averaged. A reducer that gave up on
        this peer left its part at the local values, so this peer's result differs from
        its groupmates': it takes no outer step (it will be behind, and load the state)."""
        failed = (getattr(self.averager, "last_report", None) or {}).get("failed_reducers") or []
        if failed:
            logger.warning(f"{self.run_id}: DiLoCo round {self.local_epoch}: reducers {failed} failed this peer; "
                           "no outer step")
        return not failed

    def _majority(self, gathered: Dict[Any, Any]) -> bool:
        """This round is still open (no peer declares a later one: no group took it yet)
        and the group's members at this round are a strict majority of the swarm: every
        peer that declares this round or an earlier one, and every member. Peers behind
        count (they will load the state that goes on), and so do members whose round
        differs (their pseudo-gradients belong to another round): a peer whose new round
        has not reached the DHT yet is still counted, at its old round. Two disjoint
        groups of one round cannot both hold such a majority, so a split round steps at
        most once; a group that forms after another took the round sees that group's later
        round and takes no step either. The peers of the other groups keep their local
        steps for the next round and load the state that went on."""
        at_round = {peer for peer, epoch in gathered.items() if epoch == self.local_epoch}
        try:
            found = self.averager.dht.get(f"{self.averager.prefix}.all_averagers", latest=True)
        except Exception as e:  # without the swarm's rounds, no step: it may be a minority
            logger.warning(f"{self.run_id}: DiLoCo round {self.local_epoch}: could not read the swarm's rounds "
                           f"({e!r}); no outer step")
            self.deferred_rounds += 1
            return False
        entries = found.value if found is not None and isinstance(found.value, dict) else {}
        declared = [(_declared_peer(subkey), entry.value) for subkey, entry in entries.items()
                    if isinstance(entry.value, (int, float))]
        later = [peer for peer, epoch in declared if epoch > self.local_epoch and peer not in gathered]
        swarm = set(gathered) | {peer for peer, epoch in declared if epoch <= self.local_epoch}
        if not later and 2 * len(at_round) > len(swarm):
            return True
        self.deferred_rounds += 1
        why = (f"{len(later)} peers are past it" if later else
               f"this group holds {len(at_round)} of the {len(swarm)} peers at it or behind, not a majority")
        logger.warning(f"{self.run_id}: DiLoCo round {self.local_epoch}: {why}; no outer step (the local steps go "
                       "into the next round)")
        return False

    def _behind(self, gathered: Dict[Any, Any]) -> bool:
        """A groupmate at a later round: this peer takes the swarm's outer state instead."""
        epochs = [e for e in gathered.values() if isinstance(e, int)]
        if epochs and max(epochs) > self.local_epoch:
            logger.info(f"{self.run_id}: a groupmate is at round {max(epochs)}, this peer at {self.local_epoch}; "
                        "loading the swarm's state")
            self.load_state_from_peers()
            return True
        return False

    # ------------------------------------------------------------------ state
    def _outer_state(self) -> Tuple[Any, List[torch.Tensor], List[CompressionInfo]]:
        with self._lock:
            tensors = [t.clone() for t in self.outer_params]
            tensors += [self.outer.state[t]["momentum_buffer"].clone() for t in self.outer_params]
            epoch = self.local_epoch
        infos = [CompressionInfo.from_tensor(t, key=i, role=TensorRole.PARAMETER) for i, t in enumerate(tensors)]
        return dict(epoch=epoch, num_params=len(self.outer_params)), tensors, infos

    def load_state_from_peers(self) -> bool:
        """Takes the outer parameters, outer momentum and round of the most advanced peer
        (not of one behind this peer); the local parameters restart from them."""
        if self._pending is not None:
            self._pending[0].cancel()
            self._pending = None
        loaded = self.averager.load_state_from_peers(timeout=self.load_state_timeout)
        if loaded is None:
            return False
        metadata, tensors = loaded
        n = len(self.outer_params)
        if not isinstance(metadata, dict) or metadata.get("num_params") != n or len(tensors) != 2 * n:
            raise ValueError(f"expected a DiLoCo state of {n} parameters, got {metadata!r} with {len(tensors)} tensors")
        if metadata["epoch"] < self.local_epoch:
            logger.warning(f"{self.run_id}: refusing the state of a peer at round {metadata['epoch']}, behind this "
                           f"peer's {self.local_epoch}")
            return False
        with torch.no_grad(), self._lock:
            for own, new, momentum in zip(self.outer_params, tensors[:n], tensors[n:]):
                if tuple(own.shape) != tuple(new.shape):
                    raise ValueError(f"expected a state of this model's shapes, got {tuple(new.shape)} for "
                                     f"{tuple(own.shape)}")
                own.copy_(new)
                self.outer.state[own]["momentum_buffer"].copy_(momentum)
            for param, start in zip(self.params, self.outer_params):
                param.copy_(start)
            self.local_epoch = int(metadata["epoch"])
        self._declare_round()
        return True

    def shutdown(self) -> None:
        if self._pending is not None:
            self._pending[0].cancel()
            self._pending = None
        self.averager.shutdown()
