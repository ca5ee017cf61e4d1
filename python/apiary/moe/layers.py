"""The built-in expert classes (hivemind's ``moe/server/layers``): ``ffn``,
``transformer``, ``nop``, ``nop_delay`` and ``det_dropout``, and
``register_expert_class`` for one's own. ``name_to_block[name](hidden_dim)`` makes the
module; ``name_to_input[name](batch_size, hidden_dim)`` makes a sample batch of its
forward inputs (the server's schema comes from it)."""
import math
import time
from typing import Callable, Dict, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

Inputs = Union[torch.Tensor, Tuple[torch.Tensor, ...]]
name_to_block: Dict[str, Callable[[int], nn.Module]] = {}
name_to_input: Dict[str, Callable[[int, int], Inputs]] = {}


def register_expert_class(name: str, sample_input: Callable[[int, int], Inputs]) -> Callable[[type], type]:
    """Registers a module class (made as ``cls(hidden_dim)``) under ``name``, with a
    function making a sample batch ``sample_input(batch_size, hidden_dim)``."""

    def wrapper(cls: type) -> type:
        if not issubclass(cls, nn.Module):
            raise TypeError(f"expected an nn.Module subclass for expert class '{name}', got {cls}")
        if name in name_to_block:
            raise ValueError(f"expert class '{name}' is registered already")
        name_to_block[name] = cls
        name_to_input[name] = sample_input
        return cls

    return wrapper


@register_expert_class("ffn", lambda batch_size, hid_dim: torch.empty((batch_size, hid_dim)))
class FeedforwardBlock(nn.Module):
    """Linear(h, 4h), GELU, Linear(4h, h), then LayerNorm of the residual sum."""

    def __init__(self, hid_dim: int):
        super().__init__()
        self.ffn = nn.Linear(hid_dim, 4 * hid_dim)
        self.ffn_output = nn.Linear(4 * hid_dim, hid_dim)
        self.layer_norm = nn.LayerNorm(hid_dim, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(x + self.ffn_output(F.gelu(self.ffn(x))))


_SEQ_LEN = 128


@register_expert_class("transformer", lambda batch_size, hid_dim: (
    torch.empty((batch_size, _SEQ_LEN, hid_dim)), torch.empty((batch_size, _SEQ_LEN), dtype=torch.bool)))
class TransformerEncoderLayer(nn.Module):
    """A transformer encoder layer over [batch, seq, h] with a key padding mask [batch, seq]
    (True: padding), 4h feed-forward, GELU, no dropout (outputs depend on inputs alone)."""

    def __init__(self, hid_dim: int):
        super().__init__()
        heads = math.gcd(hid_dim, 16)
        self.layer = nn.TransformerEncoderLayer(hid_dim, heads, dim_feedforward=4 * hid_dim, dropout=0.0,
                                                activation="gelu", batch_first=True)

    def forward(self, x: torch.Tensor, src_key_padding_mask: torch.Tensor) -> torch.Tensor:
        return self.layer(x, src_key_padding_mask=src_key_padding_mask.bool())


@register_expert_class("nop", lambda batch_size, hid_dim: torch.empty((batch_size, hid_dim)))
class NopExpert(nn.Module):
    """Outputs its inputs (a parameter of no elements keeps the optimizer happy)."""

    def __init__(self, hid_dim: int):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(0), requires_grad=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


@register_expert_class("nop_delay", lambda batch_size, hid_dim: torch.empty((batch_size, hid_dim)))
class DelayedNopExpert(nn.Module):
    """nop that takes ``delay`` seconds per forward (for timeout tests)."""

    def __init__(self, hid_dim: int, delay: float = 0.5):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(0), requires_grad=True)
        self.delay = delay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.delay)
        return x.clone()


class _MaskedScale(torch.autograd.Function):
    """x * mask / keep_prob, with the mask given (so the same inputs give the same bits)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, mask: torch.Tensor, keep_prob: float) -> torch.Tensor:  # type: ignore[override]
        scale = mask.to(x.dtype) / keep_prob
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (scale,) = ctx.saved_tensors
        return grad * scale, None, None


@register_expert_class("det_dropout", lambda batch_size, hid_dim: (
    torch.empty((batch_size, hid_dim)), torch.randint(0, 1, (batch_size, hid_dim))))
class DeterministicDropout(nn.Module):
    """Linear(h, h), then dropout by the mask the caller gives (1 keeps, 0 drops), scaled
    by 1 / (1 - drop_prob): deterministic, for reproducible training."""

    def __init__(self, hid_dim: int, drop_prob: float = 0.1):
        super().__init__()
        self.linear = nn.Linear(hid_dim, hid_dim)
        self.keep_prob = 1.0 - drop_prob

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return _MaskedScale.apply(self.linear(x), mask, self.keep_prob)
