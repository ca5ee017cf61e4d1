"""Torch tensors to and from the form the C++ module takes them in: (bytes, dtype name,
shape). Outgoing tensors are read in place (one copy, into the message); incoming ones
are torch views of the decoded buffers (no copy)."""
from typing import Any, Iterable, List, Sequence, Tuple

import numpy as np
import torch

_NAMES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
}
_DTYPES = {name: dtype for dtype, name in _NAMES.items()}

Wire = Tuple[Any, str, List[int]]


def dtype_name(dtype: torch.dtype) -> str:
    """The wire name of a torch dtype ("float32"); TypeError for one apiary lacks."""
    try:
        return _NAMES[dtype]
    except KeyError:
        raise TypeError(f"expected a tensor of {sorted(_NAMES.values())}, got {dtype}") from None


def torch_dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


def to_wire(tensor: torch.Tensor) -> Wire:
    """(uint8 array over the values, dtype name, shape) of a CPU copy of `tensor`."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    name = dtype_name(tensor.dtype)
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    if flat.numel() == 0:
        return np.zeros(0, dtype=np.uint8), name, list(tensor.shape)
    raw = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
    return raw.numpy(), name, list(tensor.shape)


def from_wire(wire: Sequence[Any]) -> torch.Tensor:
    """The torch tensor over an answer's (uint8 array, dtype name, shape)."""
    values, name, shape = wire
    raw = torch.from_numpy(np.asarray(values, dtype=np.uint8))
    dtype = torch_dtype(name)
    if raw.numel() == 0:
        return torch.empty(shape, dtype=dtype)
    if dtype == torch.bool:
        return raw.to(torch.bool).reshape(shape)
    return raw.view(dtype).reshape(shape)


def many_to_wire(tensors: Iterable[torch.Tensor]) -> List[Wire]:
    return [to_wire(t) for t in tensors]


def many_from_wire(wires: Iterable[Sequence[Any]]) -> List[torch.Tensor]:
    return [from_wire(w) for w in wires]
