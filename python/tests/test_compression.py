"""apiary.compression with hivemind's API (hivemind's test_compression.py): codec error
bounds, serialization round trips for every dtype, requires_grad, 0-d tensors, the
adaptive compressions, MEANSTD_16BIT decoded as hivemind's torch code does, bad input."""
import numpy as np
import pytest
import torch

import apiary
from apiary.compression import (
    BlockwiseQuantization,
    CompressionInfo,
    CompressionType,
    Float16Compression,
    NoCompression,
    PerTensorCompression,
    Quantile8BitQuantization,
    RoleAdaptiveCompression,
    ScaledFloat16Compression,
    SizeAdaptiveCompression,
    TensorDescriptor,
    TensorRole,
    Uniform8BitQuantization,
    deserialize_torch_tensor,
    serialize_torch_tensor,
)


@pytest.mark.parametrize(
    "codec,bound",
    [(CompressionType.FLOAT16, 5e-8), (CompressionType.MEANSTD_16BIT, 5e-8), (CompressionType.QUANTILE_8BIT, 8e-4),
     (CompressionType.UNIFORM_8BIT, 8e-4), (CompressionType.BLOCKWISE_8BIT, 8e-4)],
)
def test_tensor_compression(codec, bound):
    torch.manual_seed(0)
    x = torch.randn(128, 128, 64)
    restored = deserialize_torch_tensor(serialize_torch_tensor(x, codec))
    assert torch.mean((x - restored) ** 2).item() < bound
    zeros = deserialize_torch_tensor(serialize_torch_tensor(torch.zeros(5, 5), codec))
    if codec != CompressionType.BLOCKWISE_8BIT:
        assert torch.isfinite(zeros).all()


def test_none_round_trip_is_exact_and_keeps_requires_grad():
    x = torch.randn(512, 128, requires_grad=True)
    message = serialize_torch_tensor(x, CompressionType.NONE)
    assert isinstance(message, apiary.runtime_pb2.Tensor)
    assert message.dtype == "float32" and list(message.size) == [512, 128] and message.requires_grad
    assert message.buffer == x.detach().numpy().tobytes()  # hivemind's bytes
    y = deserialize_torch_tensor(message)
    assert torch.equal(x.detach(), y.detach()) and y.requires_grad
    assert torch.equal(deserialize_torch_tensor(message.SerializeToString()).detach(), x.detach())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64,
                                   torch.int64, torch.int32, torch.uint8, torch.bool])
def test_dtypes_are_kept(dtype):
    x = (torch.randn(7, 5) * 10).to(dtype)
    codecs = [CompressionType.NONE]
    if dtype in (torch.float32, torch.float16, torch.float64):
        codecs += [CompressionType.FLOAT16, CompressionType.MEANSTD_16BIT]
    for codec in codecs:
        y = deserialize_torch_tensor(serialize_torch_tensor(x, codec))
        assert y.dtype == dtype and y.shape == x.shape, codec
    assert torch.equal(deserialize_torch_tensor(serialize_torch_tensor(x)), x)


def test_zero_dim_tensors():
    x = torch.tensor(3.5)
    for codec in (CompressionType.NONE, CompressionType.FLOAT16):
        y = deserialize_torch_tensor(serialize_torch_tensor(x, codec))
        assert y.shape == () and y.item() == 3.5
    with pytest.raises(NotImplementedError):
        serialize_torch_tensor(x, CompressionType.MEANSTD_16BIT)


def _hivemind_meanstd_decode(message, dtype):
    """hivemind's ScaledFloat16Compression.extract, written out in torch."""
    shape = list(message.size)
    stats_shape = shape[:-1] + [1]
    count = int(np.prod(stats_shape))
    buf = message.buffer
    means = torch.as_tensor(np.frombuffer(buf, dtype=np.float32, offset=len(buf) - 8 * count, count=count).copy())
    stds = torch.as_tensor(np.frombuffer(buf, dtype=np.float32, offset=len(buf) - 4 * count, count=count).copy())
    halves = np.frombuffer(buf, dtype=np.float16, count=int(np.prod(shape)))
    out = torch.as_tensor(np.asarray(halves, dtype=np.dtype(str(dtype).replace("torch.", ""))).copy()).reshape(shape)
    return out.mul_(stds.reshape(stats_shape)).add_(means.reshape(stats_shape))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_meanstd_decodes_to_hivemind_values(dtype):
    torch.manual_seed(1)
    x = (torch.randn(64, 100) * 3 + 1).to(dtype)
    message = serialize_torch_tensor(x, CompressionType.MEANSTD_16BIT)
    ours = deserialize_torch_tensor(message)
    theirs = _hivemind_meanstd_decode(message, dtype)
    assert ours.dtype == theirs.dtype
    assert torch.equal(ours, theirs)


def test_adaptive_compression_chooses_per_tensor():
    size = SizeAdaptiveCompression(500, less=NoCompression(), greater_equal=Float16Compression())
    small = CompressionInfo("a", TensorDescriptor((10, 10)))
    large = CompressionInfo("b", TensorDescriptor((10, 50)))
    assert size.choose(small).compression_type == CompressionType.NONE
    assert size.choose(large).compression_type == CompressionType.FLOAT16
    role = RoleAdaptiveCompression(parameter=Uniform8BitQuantization(), gradient=size, default=Float16Compression())
    assert role.choose(CompressionInfo(0, TensorDescriptor((4,)), TensorRole.PARAMETER)).compression_type == 4
    assert role.choose(CompressionInfo(0, TensorDescriptor((4,)), TensorRole.GRADIENT)).compression_type == 0
    assert role.choose(CompressionInfo(0, TensorDescriptor((4,)), TensorRole.OPTIMIZER)).compression_type == 2
    per = PerTensorCompression([Quantile8BitQuantization(), BlockwiseQuantization(), ScaledFloat16Compression()])
    assert [per.choose(CompressionInfo(i, TensorDescriptor((4,)))).compression_type for i in range(3)] == [3, 5, 1]
    x = torch.randn(30, 30)
    assert size.compress(x).compression == CompressionType.FLOAT16
    assert serialize_torch_tensor(x, size).compression == CompressionType.FLOAT16


def test_bad_input():
    with pytest.raises(TypeError):
        serialize_torch_tensor(np.zeros(3))
    with pytest.raises(ValueError):
        serialize_torch_tensor(torch.zeros(3), 17)
    with pytest.raises(NotImplementedError):
        serialize_torch_tensor(torch.zeros(3, dtype=torch.int64), CompressionType.FLOAT16)
    with pytest.raises(ValueError):
        deserialize_torch_tensor(b"\xff\xff not a tensor")
    message = serialize_torch_tensor(torch.zeros(16))
    message.buffer = message.buffer[:-4]  # truncated
    with pytest.raises(ValueError):
        deserialize_torch_tensor(message)
