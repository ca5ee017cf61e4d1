"""ModuleBackend (hivemind's ``moe/server/module_backend.py``): a torch module served as
an expert, with its optimizer and scheduler. The C++ server batches the requests and
calls ``forward`` and ``backward`` with whole batches."""
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ._wire import Wire, many_from_wire, many_to_wire
from .schema import BatchTensorDescriptor, Outputs, schema_to_native


def _flat_outputs(outputs: Any) -> Tuple[torch.Tensor, ...]:
    return (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)


class ModuleBackend:
    """Serves ``module`` as expert ``name``: its forward inputs are ``args_schema`` and
    then ``kwargs_schema`` by name; ``outputs_schema`` is found by a dummy batch of 3 when
    not given. ``backward`` re-runs forward with grad, back-propagates the output
    gradients, steps ``optimizer`` (then ``scheduler``) and returns the inputs' gradients
    (zeros for inputs that are not floating point); ``clip_grad_norm`` clips the
    parameters' gradients before the step."""

    def __init__(self, name: str, module: nn.Module, *, optimizer: Optional[torch.optim.Optimizer] = None,
                 scheduler: Any = None, args_schema: Sequence[BatchTensorDescriptor] = (),
                 kwargs_schema: Optional[Dict[str, BatchTensorDescriptor]] = None,
                 outputs_schema: Optional[Outputs] = None, max_batch_size: int = 4096,
                 clip_grad_norm: Optional[float] = None, **_: Any):
        self.name, self.module, self.optimizer, self.scheduler = name, module, optimizer, scheduler
        self.clip_grad_norm = clip_grad_norm
        self.args_schema = tuple(args_schema)
        self.kwargs_schema = dict(kwargs_schema or {})
        self.forward_schema = (self.args_schema, self.kwargs_schema)
        self.max_batch_size = max_batch_size
        self.lock = threading.Lock()  # compute and checkpoints, one at a time
        if outputs_schema is None:
            with torch.no_grad():
                dummy = self.module(*(d.make_zeros(3) for d in self.args_schema),
                                    **{k: d.make_zeros(3) for k, d in self.kwargs_schema.items()})
            if isinstance(dummy, torch.Tensor):
                outputs_schema = BatchTensorDescriptor.from_tensor(dummy)
            else:
                outputs_schema = tuple(BatchTensorDescriptor.from_tensor(t) for t in dummy)
        self.outputs_schema = outputs_schema
        self.keyword_names = tuple(sorted(self.kwargs_schema))

    def get_info(self) -> Dict[str, Any]:
        return {"forward_schema": self.forward_schema, "outputs_schema": self.outputs_schema,
                "keyword_names": self.keyword_names}

    def native_schema(self) -> Dict[str, Any]:
        return schema_to_native(self.args_schema, self.kwargs_schema, self.outputs_schema)

    def _call(self, inputs: Sequence[torch.Tensor]) -> Any:
        n = len(self.args_schema)
        kwargs = dict(zip(self.keyword_names, inputs[n:]))
        return self.module(*inputs[:n], **kwargs)

    def forward(self, *inputs: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """The outputs of one batch (args, then kwargs by name), without grad."""
        with torch.no_grad():
            return _flat_outputs(self._call(inputs))

    def backward(self, *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """The gradients of the forward inputs, given them and one gradient per output;
        steps the optimizer."""
        n_inputs = len(self.args_schema) + len(self.kwargs_schema)
        inputs = [t.detach().requires_grad_(t.is_floating_point()) for t in tensors[:n_inputs]]
        grad_outputs = tensors[n_inputs:]
        with torch.enable_grad():
            outputs = _flat_outputs(self._call(inputs))
            pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
            if pairs:
                torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        self.on_backward(len(tensors[0]) if tensors else 0)
        return tuple(x.grad if x.grad is not None else torch.zeros_like(x) for x in inputs)

    def on_backward(self, batch_size: int) -> None:
        """One optimizer step (and a scheduler step) after a backward batch."""
        if self.optimizer is not None:
            if self.clip_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad()
        if self.scheduler is not None:
            self.scheduler.step()

    def state_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"module": self.module.state_dict()}
        if self.optimizer is not None:
            out["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            out["scheduler"] = self.scheduler.state_dict()
        return out

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.module.load_state_dict(state["module"])
        if self.optimizer is not None and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])


class _Served:
    """What the C++ server calls: a backend's forward and backward over wire tensors,
    under the backend's lock."""

    def __init__(self, backend: ModuleBackend):
        self.backend = backend

    def forward(self, wires: List[Wire]) -> List[Wire]:
        with self.backend.lock:
            return many_to_wire(self.backend.forward(*many_from_wire(wires)))

    def backward(self, wires: List[Wire]) -> List[Wire]:
        with self.backend.lock:
            return many_to_wire(self.backend.backward(*many_from_wire(wires)))
