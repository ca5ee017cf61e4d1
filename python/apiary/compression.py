"""Tensor compression with hivemind's names and bytes (hivemind.compression).

``serialize_torch_tensor`` / ``deserialize_torch_tensor`` convert between a torch
tensor and runtime.proto's ``Tensor`` message (``apiary.runtime_pb2``), encoded by
apiary's C++ codecs: the bytes equal hivemind's, and decoding gives hivemind's values
for every dtype. The codec classes name one ``CompressionType`` each; the adaptive ones
choose a codec per tensor (by size, role or key), in averaging as in serialization.
"""
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, Mapping, Optional, Sequence, Union

import torch

from . import _apiary


class CompressionType(IntEnum):
    """runtime.proto's CompressionType."""

    NONE = 0
    MEANSTD_16BIT = 1
    FLOAT16 = 2
    QUANTILE_8BIT = 3
    UNIFORM_8BIT = 4
    BLOCKWISE_8BIT = 5


class TensorRole(Enum):
    ACTIVATION = 0
    PARAMETER = 1
    GRADIENT = 2
    OPTIMIZER = 3
    UNSPECIFIED = 4


@dataclass(frozen=True)
class TensorDescriptor:
    """What a codec may look at: the tensor's shape and dtype."""

    size: tuple
    dtype: torch.dtype = torch.float32

    def numel(self) -> int:
        n = 1
        for d in self.size:
            n *= int(d)
        return n


@dataclass(frozen=True)
class CompressionInfo:
    """Which tensor is being compressed: its key (name or index), descriptor and role."""

    key: Any
    descriptor: TensorDescriptor
    role: TensorRole = TensorRole.UNSPECIFIED
    part_index: int = 0
    part_size: Optional[int] = None

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, key: Any = None, role: TensorRole = TensorRole.UNSPECIFIED):
        return cls(key, TensorDescriptor(tuple(tensor.shape), tensor.dtype), role)


class CompressionBase:
    """A codec: ``compression_type`` is the CompressionType it encodes."""

    compression_type = CompressionType.NONE

    def choose(self, info: CompressionInfo) -> "CompressionBase":
        """The codec used for the tensor of ``info`` (itself, for a plain codec)."""
        return self

    def compress(self, tensor: torch.Tensor, info: Optional[CompressionInfo] = None, allow_inplace: bool = False):
        """The runtime_pb2.Tensor of ``tensor``."""
        info = info or CompressionInfo.from_tensor(tensor)
        return serialize_torch_tensor(tensor, self.choose(info).compression_type)

    def extract(self, serialized: Any) -> torch.Tensor:
        return deserialize_torch_tensor(serialized)

    def estimate_compression_ratio(self, info: CompressionInfo) -> float:
        codec = self.choose(info).compression_type
        bits = {CompressionType.NONE: 32, CompressionType.FLOAT16: 16, CompressionType.MEANSTD_16BIT: 16}
        return bits.get(codec, 8) / 32

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NoCompression(CompressionBase):
    compression_type = CompressionType.NONE


class ScaledFloat16Compression(CompressionBase):
    compression_type = CompressionType.MEANSTD_16BIT


class Float16Compression(CompressionBase):
    compression_type = CompressionType.FLOAT16


class Quantile8BitQuantization(CompressionBase):
    compression_type = CompressionType.QUANTILE_8BIT


class Uniform8BitQuantization(CompressionBase):
    compression_type = CompressionType.UNIFORM_8BIT


class BlockwiseQuantization(CompressionBase):
    compression_type = CompressionType.BLOCKWISE_8BIT


class AdaptiveCompressionBase(CompressionBase):
    """Chooses another codec per tensor."""

    def choose(self, info: CompressionInfo) -> CompressionBase:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def compression_type(self):  # type: ignore[override]
        raise AttributeError("an adaptive compression has no single compression_type; use choose(info)")


class SizeAdaptiveCompression(AdaptiveCompressionBase):
    """``greater_equal`` for tensors of at least ``threshold`` elements, ``less`` otherwise."""

    def __init__(self, threshold: int, less: CompressionBase, greater_equal: CompressionBase):
        self.threshold, self.less, self.greater_equal = int(threshold), less, greater_equal

    def choose(self, info: CompressionInfo) -> CompressionBase:
        chosen = self.greater_equal if info.descriptor.numel() >= self.threshold else self.less
        return chosen.choose(info)


class RoleAdaptiveCompression(AdaptiveCompressionBase):
    """A codec per tensor role (activations, parameters, gradients, optimizer state)."""

    def __init__(self, *, activation: Optional[CompressionBase] = None, parameter: Optional[CompressionBase] = None,
                 gradient: Optional[CompressionBase] = None, optimizer: Optional[CompressionBase] = None,
                 default: CompressionBase = NoCompression()):
        self.role_compressions = {
            TensorRole.ACTIVATION: activation or default,
            TensorRole.PARAMETER: parameter or default,
            TensorRole.GRADIENT: gradient or default,
            TensorRole.OPTIMIZER: optimizer or default,
            TensorRole.UNSPECIFIED: default,
        }

    def choose(self, info: CompressionInfo) -> CompressionBase:
        return self.role_compressions[info.role].choose(info)


class PerTensorCompression(AdaptiveCompressionBase):
    """A codec per tensor key (an index into a sequence, or a key of a mapping)."""

    def __init__(self, tensor_compressions: Union[Sequence[CompressionBase], Mapping[Any, CompressionBase]]):
        self.tensor_compressions = tensor_compressions

    def choose(self, info: CompressionInfo) -> CompressionBase:
        return self.tensor_compressions[info.key].choose(info)


def _codec_of(compression: Any) -> int:
    if isinstance(compression, CompressionBase):
        return int(compression.compression_type)
    return int(compression)


def serialize_torch_tensor(tensor: torch.Tensor, compression_type: Any = CompressionType.NONE,
                           info: Optional[CompressionInfo] = None, allocate: bool = True, **kwargs: Any):
    """runtime.proto's Tensor of ``tensor`` encoded with ``compression_type`` (a
    CompressionType, or a codec; an adaptive one chooses by ``info``)."""
    from .runtime_pb2 import Tensor

    if isinstance(compression_type, AdaptiveCompressionBase):
        compression_type = compression_type.choose(info or CompressionInfo.from_tensor(tensor))
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    data = data.contiguous()
    dtype = str(data.dtype).replace("torch.", "")
    nbytes = data.numel() * data.element_size()
    codec = _codec_of(compression_type)
    buffer, wire_dtype = _apiary.encode_tensor(dtype, list(data.shape), data.data_ptr(), nbytes, codec)
    return Tensor(buffer=buffer, size=list(data.shape), dtype=wire_dtype, compression=codec,
                  requires_grad=bool(tensor.requires_grad))


_DTYPES = {name: getattr(torch, name) for name in
           ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool",
            "complex64", "complex128")}


def deserialize_torch_tensor(serialized: Any) -> torch.Tensor:
    """The torch tensor of a runtime.proto Tensor (a message, or its serialized bytes)."""
    if isinstance(serialized, (bytes, bytearray)):
        from .runtime_pb2 import Tensor

        try:
            serialized = Tensor.FromString(bytes(serialized))
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
            raise ValueError(f"expected a serialized runtime.proto Tensor, got bytes that do not parse: {e}") from None
    values, dtype = _apiary.decode_tensor(serialized.buffer, serialized.dtype, list(serialized.size),
                                          int(serialized.compression))
    out = torch.from_numpy(values).view(_DTYPES[dtype]).reshape(tuple(serialized.size))
    if serialized.requires_grad:
        out.requires_grad_(True)
    return out
