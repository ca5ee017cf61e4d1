"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/): valid inputs of
each kind the target's first byte selects, made with apiary's own encoders. Run once
with the built module: PYTHONPATH=build/python /usr/bin/python3 fuzz/make_seeds.py"""
import os
import struct

import msgpack
import torch

import apiary
from apiary import compression
from apiary.runtime_pb2 import CompressionType, ExpertRequest, ExpertResponse

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    folder = os.path.join(HERE, "corpus", "fuzz_" + target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def base58_decode(text):
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    n = 0
    for c in text:
        n = n * 58 + alphabet.index(c)
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return b"\0" * (len(text) - len(text.lstrip("1"))) + body


def framed(messages):
    return b"".join(struct.pack("<H", len(m)) + m for m in messages)


def main():
    torch.manual_seed(0)
    dht = apiary.DHT(start=True)
    address = dht.get_visible_maddrs()[0]
    peer_id = address.split("/p2p/")[1]
    dht.shutdown()
    write("identity", "multiaddr", b"\x00/ip4/127.0.0.1/tcp/4100")
    write("identity", "multiaddr_ip6", b"\x00/ip6/::1/tcp/4100/p2p/" + peer_id.encode())
    write("identity", "peer_address", b"\x01" + address.encode())
    write("identity", "peer_id_text", b"\x02" + peer_id.encode())
    write("identity", "base58", b"\x04" + peer_id.encode())
    id_bytes = base58_decode(peer_id)
    write("identity", "peer_id_bytes", b"\x03" + id_bytes)
    write("identity", "public_key_proto", b"\x05" + id_bytes[2:])  # an identity multihash of the key

    codecs = ["NONE", "FLOAT16", "MEANSTD_16BIT", "QUANTILE_8BIT", "UNIFORM_8BIT", "BLOCKWISE_8BIT"]
    x = torch.randn(3, 5)
    for name in codecs:
        message = compression.serialize_torch_tensor(x, getattr(CompressionType, name))
        write("tensor", name.lower(), message.SerializeToString())
    write("tensor", "bfloat16", compression.serialize_torch_tensor(x.bfloat16()).SerializeToString())
    write("tensor", "int64", compression.serialize_torch_tensor(torch.arange(6)).SerializeToString())

    batch = compression.serialize_torch_tensor(torch.randn(2, 4))
    request = ExpertRequest(uid="ffn.0", tensors=[batch]).SerializeToString()
    half = len(request) // 2
    write("expert", "stream_request", b"\x00" + framed([request[:half], request[half:]]))
    write("expert", "stream_whole", b"\x00" + framed([request]))
    write("expert", "stream_response", b"\x01" + framed([ExpertResponse(tensors=[batch]).SerializeToString()]))
    mask = compression.serialize_torch_tensor(torch.ones(2, 4, dtype=torch.int64))
    write("expert", "unary_request", b"\x03" + request)
    write("expert", "unary_dropout", b"\x03" + ExpertRequest(uid="d.0", tensors=[batch, mask]).SerializeToString())
    write("expert", "state", b"\x04" + b"apiary-expert-state-1" + struct.pack("<I", 3) + b"ffn" +
          struct.pack("<II", 4, 4) + struct.pack("<4Q", 64, 16, 64, 4) + b"\0" * 4 * (64 + 16 + 64 + 4))
    info = {"forward_schema": [[msgpack.ExtType(0x51, b"\x00")], {}], "outputs_schema": [], "keyword_names": []}
    write("expert", "info", b"\x02" + msgpack.packb(info, use_bin_type=True))


if __name__ == "__main__":
    main()
