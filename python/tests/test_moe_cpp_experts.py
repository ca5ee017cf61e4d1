"""The C++ built-in `transformer` expert served by an `apiary experts` process, called
from Python over UCX on loopback, against torch's nn.TransformerEncoderLayer holding the
same parameters (read from the server's checkpoint): forward, the input gradient, and
the SGD step of every parameter."""
import os
import signal
import struct
import subprocess

import pytest
import torch

import apiary
from apiary.moe import ExpertInfo, RemoteExpert

APIARY_BIN = os.environ.get("APIARY_BIN")
H = 32  # 16 heads of 2
SEQ = 128
LR = 0.5

pytestmark = pytest.mark.skipif(not APIARY_BIN, reason="APIARY_BIN (the apiary executable) is not set")


def read_state(path):
    """The float32 arrays of a C++ expert's checkpoint (core/moe/expert_state.hpp)."""
    data = open(path, "rb").read()
    magic = b"apiary-expert-state-1"
    assert data.startswith(magic)
    at = len(magic)
    (name_size,) = struct.unpack_from("<I", data, at)
    at += 4
    assert data[at:at + name_size] == b"transformer"
    at += name_size
    hidden, count = struct.unpack_from("<II", data, at)
    at += 8
    assert hidden == H
    sizes = struct.unpack_from(f"<{count}Q", data, at)
    at += 8 * count
    arrays = []
    for size in sizes:
        arrays.append(torch.frombuffer(bytearray(data[at:at + 4 * size]), dtype=torch.float32))
        at += 4 * size
    assert at == len(data)
    return arrays


def torch_layer(arrays):
    """torch's layer with the C++ expert's parameters (their order: transformer_expert.hpp)."""
    layer = torch.nn.TransformerEncoderLayer(H, 16, dim_feedforward=4 * H, dropout=0.0, activation="gelu",
                                             batch_first=True)
    targets = [layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias, layer.self_attn.out_proj.weight,
               layer.self_attn.out_proj.bias, layer.norm1.weight, layer.norm1.bias, layer.linear1.weight,
               layer.linear1.bias, layer.linear2.weight, layer.linear2.bias, layer.norm2.weight, layer.norm2.bias]
    with torch.no_grad():
        for target, values in zip(targets, arrays):
            target.copy_(values.view_as(target))
    layer.train()  # the slow path, as the server's backward runs
    return layer, targets


def serve(checkpoints):
    process = subprocess.Popen(
        [APIARY_BIN, "experts", "--expert-uids", "tr.0", "--expert-cls", "transformer", "--hidden-dim", str(H),
         "--learning-rate", str(LR), "--seed", "3", "--stats-every", "0", "--checkpoint-dir", str(checkpoints),
         "--checkpoint-period", "3600", "--listen", "/ip4/127.0.0.1/tcp/0"],
        stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    assert line.startswith("serving "), line
    return process, line.split()[1]


def stop(process):
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0


def test_cpp_transformer_expert_is_torchs_encoder_layer(tmp_path):
    torch.manual_seed(0)
    dht = apiary.DHT(start=True)
    x = torch.randn(3, SEQ, H)
    mask = torch.zeros(3, SEQ, dtype=torch.bool)
    mask[0, 100:] = True
    mask[2, ::3] = True

    process, address = serve(tmp_path)
    expert = RemoteExpert(ExpertInfo("tr.0", address), dht)
    info = expert.info
    assert [tuple(d.size) for d in info["forward_schema"][0]] == [(None, SEQ, H), (None, SEQ)]
    y = expert(x, mask)
    stop(process)  # saves the parameters it started from
    start = read_state(tmp_path / "tr.0" / "checkpoint_last.bin")
    layer, params = torch_layer(start)
    with torch.no_grad():
        expected = layer(x, src_key_padding_mask=mask)
    assert torch.allclose(y, expected, atol=1e-4), (y - expected).abs().max()

    # Backward from the same parameters: the restarted server loads them.
    process, address = serve(tmp_path)
    expert = RemoteExpert(ExpertInfo("tr.0", address), dht)
    g = torch.randn(3, SEQ, H)
    ours = x.clone().requires_grad_(True)
    expert(ours, mask).backward(g)
    stop(process)  # saves the parameters after its SGD step
    theirs = x.clone().requires_grad_(True)
    layer(theirs, src_key_padding_mask=mask).backward(g)
    assert torch.allclose(ours.grad, theirs.grad, atol=1e-4), (ours.grad - theirs.grad).abs().max()
    stepped = read_state(tmp_path / "tr.0" / "checkpoint_last.bin")
    for before, after, param in zip(start, stepped, params):
        assert param.grad is not None and param.grad.abs().max() > 0
        assert torch.allclose(after, before - LR * param.grad.flatten(), atol=1e-4), \
            ((after - (before - LR * param.grad.flatten())).abs().max(), param.shape)
    dht.shutdown()
