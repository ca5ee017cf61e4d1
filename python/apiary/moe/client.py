"""The client of expert servers (hivemind's ``moe/client/expert.py`` and
``moe/expert_uid``'s DHT functions): ``RemoteExpert``, an nn.Module whose forward and
backward run on the expert's server (backward steps the server's optimizer);
``get_experts`` and ``create_remote_experts``; ``declare_experts``."""
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable

from .. import _apiary
from ..dht import DHT
from ..timed import get_dht_time
from ._wire import many_from_wire, many_to_wire
from .expert_uid import ExpertInfo
from .schema import BatchTensorDescriptor, info_from_native

DUMMY = torch.empty(0, requires_grad=True)  # makes backward run even when no input requires grad
DEFAULT_TIMEOUT = 300.0  # per call: a large batch on a CPU expert takes a while (hivemind waits without end)


class RemoteExpert(nn.Module):
    """Expert ``expert_info.uid`` on the server at ``expert_info.address``, called through
    ``dht``'s runtime; each call fails after ``timeout`` seconds without an answer.
    Called as the module itself: ``expert(*args, **kwargs)``."""

    def __init__(self, expert_info: ExpertInfo, dht: DHT, timeout: float = DEFAULT_TIMEOUT):
        super().__init__()
        self.expert_info, self.dht, self.timeout = expert_info, dht, timeout
        self._native = _apiary.RemoteExpert(dht._require(), expert_info.uid, expert_info.address, timeout)
        self._info: Optional[Dict[str, Any]] = None

    @property
    def uid(self) -> str:
        return self.expert_info.uid

    @property
    def info(self) -> Dict[str, Any]:
        """hivemind's get_info: forward_schema (args, kwargs), outputs_schema, keyword_names
        (asked of the server once)."""
        if self._info is None:
            self._info = info_from_native(self._native.info())
        return self._info

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> Any:
        args_schema, kwargs_schema = self.info["forward_schema"]
        if len(args) != len(args_schema):
            raise ValueError(f"expert '{self.uid}' takes {len(args_schema)} positional inputs, got {len(args)}")
        if set(kwargs) != set(kwargs_schema):
            raise ValueError(f"expert '{self.uid}' takes keyword inputs {sorted(kwargs_schema)}, got {sorted(kwargs)}")
        flat = (*args, *(kwargs[k] for k in sorted(kwargs)))
        outputs = _RemoteModuleCall.apply(DUMMY, self._native, *flat)
        return outputs[0] if isinstance(self.info["outputs_schema"], BatchTensorDescriptor) else outputs

    def extra_repr(self) -> str:
        return f"uid={self.uid}, address={self.expert_info.address}"


class _RemoteModuleCall(torch.autograd.Function):
    """forward on the server; backward sends the inputs and the outputs' gradients, gets
    the inputs' gradients (the server steps its optimizer)."""

    @staticmethod
    def forward(ctx: Any, dummy: torch.Tensor, native: Any, *inputs: torch.Tensor) -> Tuple[torch.Tensor, ...]:  # type: ignore[override]
        inputs = tuple(t.detach() for t in inputs)
        ctx.native = native
        ctx.save_for_backward(*inputs)
        return tuple(many_from_wire(native.forward(many_to_wire(inputs))))

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        inputs = ctx.saved_tensors
        grads = many_from_wire(ctx.native.backward(many_to_wire((*inputs, *grad_outputs))))
        return (None, None, *(g if x.is_floating_point() else None for g, x in zip(grads, inputs)))


def create_remote_experts(infos: Sequence[Optional[ExpertInfo]], dht: DHT,
                          timeout: float = DEFAULT_TIMEOUT) -> List[Optional[RemoteExpert]]:
    return [RemoteExpert(info, dht, timeout) if info is not None else None for info in infos]


def get_experts(dht: DHT, uids: Sequence[str], expiration_time: Optional[float] = None,
                return_future: bool = False, timeout: float = DEFAULT_TIMEOUT) -> List[Optional[RemoteExpert]]:
    """The RemoteExpert of each uid declared in ``dht`` (None for the others)."""
    if return_future:
        raise NotImplementedError("get_experts(return_future=True) is not supported; call it from a thread")
    found = _apiary.get_experts(dht._require(), list(uids), timeout)
    return create_remote_experts([ExpertInfo(uid, found[uid]) if uid in found else None for uid in uids], dht,
                                 timeout)


def declare_experts(dht: DHT, uids: Sequence[str], expiration_time: Optional[float] = None,
                    wait: bool = True, address: Optional[str] = None,
                    expiration: float = 60) -> Union[Dict[Any, bool], Any]:
    """Declares ``uids`` as served at ``address`` (default: ``dht``'s own) until
    ``expiration_time`` (default now + ``expiration``): hivemind's records, returned as
    {key or (key, subkey): stored}; wait=False returns the Pending operation."""
    native = dht._require()
    if expiration_time is None:
        expiration_time = get_dht_time() + expiration
    pending = _apiary.declare_experts(native, list(uids), address or native.address(), expiration_time)
    return pending.result() if wait else pending
