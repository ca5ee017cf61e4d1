"""_RemoteCallMany (hivemind's ``moe/client/moe.py``): one autograd step over many
remote experts. Every sample's rows go to each expert it chose; apiary's C++ runtime
sends all the calls at once, waits for k_min answers per sample and then at most
timeout_after_k_min, and masks out the experts that did not answer (or, with
detect_anomalies, answered with non-finite values)."""
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from .. import _apiary
from .client import RemoteExpert


def _check_finite(tensors: Sequence[torch.Tensor], what: str) -> None:
    for t in tensors:
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise ValueError(f"{what} contains NaN or infinity (detect_anomalies=True)")


def _sample_arrays(flat: Sequence[torch.Tensor], i: int) -> List[np.ndarray]:
    return [np.ascontiguousarray(t[i:i + 1].detach().cpu().to(torch.float32).numpy()) for t in flat]


class Options:
    """The k_min / timeout arguments of a RemoteMixtureOfExperts."""

    def __init__(self, k_min: int, backward_k_min: int, forward_timeout: Optional[float],
                 timeout_after_k_min: Optional[float], backward_timeout: Optional[float], detect_anomalies: bool,
                 allow_zero_outputs: bool):
        self.k_min, self.backward_k_min = k_min, backward_k_min
        self.forward_timeout, self.timeout_after_k_min = forward_timeout, timeout_after_k_min
        self.backward_timeout, self.detect_anomalies = backward_timeout, detect_anomalies
        self.allow_zero_outputs = allow_zero_outputs

    def native(self) -> Tuple[Any, ...]:
        return (self.k_min, self.backward_k_min, self.timeout_after_k_min, self.forward_timeout,
                self.backward_timeout)


class RemoteCallMany(torch.autograd.Function):
    """forward(dummy, experts per sample, outputs schema, options, *inputs) -> (mask
    [batch, max_experts], *outputs [batch, max_experts, ...]) with zeros where masked."""

    @staticmethod
    def forward(ctx: Any, dummy: torch.Tensor, experts: List[List[RemoteExpert]], outputs_schema: Sequence[Any],
                options: Options, *flat_inputs: torch.Tensor) -> Tuple[torch.Tensor, ...]:  # type: ignore[override]
        if options.detect_anomalies:
            _check_finite(flat_inputs, "the MoE input")
        batch_size = len(experts)
        max_experts = max([len(e) for e in experts] + [1])
        natives = [[e._native for e in sample] for sample in experts]
        inputs = [_sample_arrays(flat_inputs, i) for i in range(batch_size)]
        outputs, mask = _apiary.call_many_forward(natives, inputs, *options.native())
        mask_tensor = torch.zeros(batch_size, max_experts, dtype=torch.bool)
        dtype = flat_inputs[0].dtype if flat_inputs else torch.float32
        out = [torch.zeros(batch_size, max_experts, *d.instance_shape, dtype=dtype) for d in outputs_schema]
        for i, sample in enumerate(outputs):
            for j, answer in enumerate(sample):
                if not mask[i][j]:
                    continue
                tensors = [torch.from_numpy(a) for a in answer]
                if options.detect_anomalies and not all(torch.isfinite(t).all() for t in tensors):
                    continue  # a broken expert is left out, as one that did not answer
                mask_tensor[i, j] = True
                for k, t in enumerate(tensors):
                    out[k][i, j] = t.reshape(out[k].shape[2:])
        if not mask_tensor.any() and not options.allow_zero_outputs:
            raise TimeoutError("MoE forward: no expert answered in time (allow_zero_outputs=False)")
        ctx.experts, ctx.options, ctx.mask = natives, options, mask_tensor
        ctx.save_for_backward(*flat_inputs)
        ctx.mark_non_differentiable(mask_tensor)
        return (mask_tensor, *out)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, _mask_grad: Any, *grad_outputs: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        flat_inputs = ctx.saved_tensors
        options: Options = ctx.options
        if options.detect_anomalies:
            _check_finite(grad_outputs, "the gradient of the MoE output")
        batch_size = len(ctx.experts)
        mask = ctx.mask.tolist()
        inputs = [_sample_arrays(flat_inputs, i) for i in range(batch_size)]
        grads = [[[np.ascontiguousarray(g[i, j:j + 1].cpu().to(torch.float32).numpy()) for g in grad_outputs]
                  if mask[i][j] else [] for j in range(len(ctx.experts[i]))] for i in range(batch_size)]
        mask = [row[:len(ctx.experts[i])] for i, row in enumerate(mask)]
        answers, alive = _apiary.call_many_backward(ctx.experts, inputs, grads, mask, *options.native())
        grad_inputs = [torch.zeros_like(t) for t in flat_inputs]
        for i, sample in enumerate(answers):
            for j, answer in enumerate(sample):
                if not alive[i][j]:
                    continue
                for k, g in enumerate(answer):
                    grad_inputs[k][i] += torch.from_numpy(g).reshape(grad_inputs[k].shape[1:]).to(grad_inputs[k].dtype)
        return (None, None, None, None, *grad_inputs)
