"""What an expert takes and gives (hivemind's ``BatchTensorDescriptor``): a tensor whose
dimension 0 is the batch, with its instance shape, dtype, requires_grad and the
compression it travels with; and the schema dict the C++ server and client exchange."""
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch

from .. import runtime_pb2
from ._wire import dtype_name, torch_dtype

Outputs = Union["BatchTensorDescriptor", Tuple["BatchTensorDescriptor", ...]]


@dataclass(frozen=True)
class BatchTensorDescriptor:
    """A batch of tensors: ``size`` is ``(None, *instance_shape)``."""

    size: Tuple[Optional[int], ...]
    dtype: torch.dtype = torch.float32
    requires_grad: bool = False
    compression: int = runtime_pb2.CompressionType.NONE
    layout: torch.layout = field(default=torch.strided, compare=False)

    def __init__(self, *instance_size: int, dtype: torch.dtype = torch.float32, requires_grad: bool = False,
                 compression: int = runtime_pb2.CompressionType.NONE, **_: Any):
        object.__setattr__(self, "size", (None, *(int(d) for d in instance_size)))
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "requires_grad", bool(requires_grad))
        object.__setattr__(self, "compression", int(compression))
        object.__setattr__(self, "layout", torch.strided)

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, compression: int = runtime_pb2.CompressionType.NONE
                    ) -> "BatchTensorDescriptor":
        return cls(*tensor.shape[1:], dtype=tensor.dtype, requires_grad=tensor.requires_grad, compression=compression)

    @property
    def instance_shape(self) -> Tuple[int, ...]:
        return tuple(int(d) for d in self.size[1:])

    def make_zeros(self, *batch_size: int, **kwargs: Any) -> torch.Tensor:
        """A zero batch of ``batch_size`` rows."""
        return torch.zeros((*batch_size, *self.instance_shape), dtype=self.dtype, **kwargs)

    def to_native(self) -> Tuple[Sequence[int], str, bool, int]:
        return list(self.instance_shape), dtype_name(self.dtype), self.requires_grad, self.compression

    @classmethod
    def from_native(cls, native: Sequence[Any]) -> "BatchTensorDescriptor":
        shape, name, requires_grad, compression = native
        return cls(*shape, dtype=torch_dtype(name), requires_grad=requires_grad, compression=compression)


def schema_to_native(args: Sequence[BatchTensorDescriptor], kwargs: Dict[str, BatchTensorDescriptor],
                     outputs: Outputs) -> Dict[str, Any]:
    """The schema dict of the C++ module (kwargs travel after the args, by name)."""
    single = isinstance(outputs, BatchTensorDescriptor)
    outputs_list = [outputs] if single else list(outputs)
    return {
        "args": [d.to_native() for d in args],
        "kwargs": {name: kwargs[name].to_native() for name in sorted(kwargs)},
        "outputs": [d.to_native() for d in outputs_list],
        "single_output": single,
    }


def info_from_native(native: Dict[str, Any]) -> Dict[str, Any]:
    """hivemind's get_info form of a C++ schema dict: forward_schema (args, kwargs),
    outputs_schema (one descriptor or a tuple) and keyword_names."""
    args = tuple(BatchTensorDescriptor.from_native(d) for d in native["args"])
    kwargs = {name: BatchTensorDescriptor.from_native(d) for name, d in native["kwargs"].items()}
    outputs = tuple(BatchTensorDescriptor.from_native(d) for d in native["outputs"])
    return {
        "forward_schema": (args, kwargs),
        "outputs_schema": outputs[0] if native["single_output"] else outputs,
        "keyword_names": tuple(sorted(kwargs)),
    }
