#!/usr/bin/env python3
"""Writes fuzz/corpus/fuzz_frame/: scripts of valid frames (apiary.pb.Envelope encoded by
hand, field numbers from proto/envelope.proto) for fuzz_frame.cpp's engine: calls opened
to its handles, answers and errors for its own three calls, streams, spliced payloads,
ticks past deadlines, peers going down. Usage: fuzz/make_frame_seeds.py"""
import os
import struct

HELLO, OPEN, MESSAGE, ERROR, CANCEL, KEEPALIVE = 1, 2, 3, 4, 5, 6
UNARY, SERVER_STREAM, CLIENT_STREAM, BIDI_STREAM = 0, 1, 2, 3


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def envelope(kind, call_id=0, from_caller=False, handle="", rpc_kind=0, end_of_stream=False, has_message=False,
             error_code=0, error_message="", timeout_us=0, peer_id=b"", listen_addr="", payload_size=0,
             head=b"", tail=b"") -> bytes:
    out = bytearray()

    def field(number, wire, value):
        out.extend(varint(number << 3 | wire))
        if wire == 0:
            out.extend(varint(value))
        else:
            out.extend(varint(len(value)) + value)

    for number, value in ((1, kind), (2, call_id), (3, int(from_caller)), (5, rpc_kind), (6, int(end_of_stream)),
                          (7, int(has_message)), (8, error_code), (10, timeout_us), (13, payload_size)):
        if value:
            field(number, 0, value)
    for number, value in ((4, handle.encode()), (9, error_message.encode()), (11, peer_id),
                          (12, listen_addr.encode()), (14, head), (15, tail)):
        if value:
            field(number, 2, value)
    return bytes(out)


def frame(peer: int, env: bytes, body: bytes = b"") -> bytes:
    return bytes([peer & 1]) + struct.pack("<H", len(env)) + env + struct.pack("<H", len(body)) + body


def tick(ms: int) -> bytes:
    return bytes([3 << 1]) + struct.pack("<H", ms // 10)


def down(peer: int) -> bytes:
    return bytes([4 << 1 | peer])


def local(pick: int, extra: bytes = b"") -> bytes:
    return bytes([5 << 1, pick]) + extra


SEEDS = {
    "open_unary": frame(0, envelope(OPEN, 7, True, "apiary.test.unary", UNARY, True, True, payload_size=5,
                                    timeout_us=1_000_000), b"hello")
                  + local(0x80, b"answered") + local(0x80 | 0x10),
    "open_stream": frame(1, envelope(OPEN, 9, True, "apiary.test.stream", BIDI_STREAM))
                   + frame(1, envelope(MESSAGE, 9, True, has_message=True, payload_size=3), b"one")
                   + frame(1, envelope(MESSAGE, 9, True, has_message=True, end_of_stream=True, payload_size=3), b"two")
                   + local(0x80 | 0x20),
    "open_unknown_handle": frame(0, envelope(OPEN, 11, True, "apiary.test.nobody", UNARY, True, True,
                                             payload_size=1), b"x"),
    "answer_unary": frame(1, envelope(MESSAGE, 1, False, has_message=True, end_of_stream=True, payload_size=6),
                          b"answer"),
    "answer_stream": frame(0, envelope(MESSAGE, 2, False, has_message=True, payload_size=1), b"a")
                     + frame(0, envelope(MESSAGE, 2, False, end_of_stream=True)),
    "error": frame(0, envelope(ERROR, 2, False, error_code=12, error_message="the callee failed")),
    "cancel": frame(1, envelope(CANCEL, 3, False, error_code=8, error_message="cancelled")),
    "spliced": frame(1, envelope(MESSAGE, 1, False, has_message=True, end_of_stream=True, payload_size=4,
                                 head=b"head", tail=b"tail"), b"body"),
    "wrong_size": frame(1, envelope(MESSAGE, 1, False, has_message=True, payload_size=99), b"short"),
    "deadline": frame(0, envelope(OPEN, 5, True, "apiary.test.unary", UNARY, True, True, payload_size=1,
                                  timeout_us=10_000), b"q") + tick(20) + tick(6000),
    "hello_keepalive": frame(0, envelope(HELLO, peer_id=b"\x00\x24" + bytes(36), listen_addr="127.0.0.1:4001"))
                       + frame(0, envelope(KEEPALIVE)),
    "peer_down": frame(0, envelope(OPEN, 13, True, "apiary.test.stream", SERVER_STREAM, True, True,
                                   payload_size=1), b"s") + down(0) + down(1),
    "call_commands": local(1, b"more") + local(3 | 0x30) + local(2 | 0x10),
}

if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_frame")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
