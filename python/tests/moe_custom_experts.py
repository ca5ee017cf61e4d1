"""An expert class for the tests, loaded by servers through custom_module_path: a
Linear layer that raises on a NaN input (a failing module)."""
import torch
import torch.nn as nn

from apiary.moe import register_expert_class


@register_expert_class("nan_raises", lambda batch_size, hid_dim: torch.empty((batch_size, hid_dim)))
class NanRaises(nn.Module):
    def __init__(self, hid_dim: int):
        super().__init__()
        self.linear = nn.Linear(hid_dim, hid_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.isnan(x).any():
            raise ValueError("NaN in the expert's input")
        return self.linear(x)
