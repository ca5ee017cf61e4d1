"""serialize_torch_tensor / deserialize_torch_tensor per codec on hivemind's
benchmark_tensor_compression.py tensor (10 M float32 values), through one implementation's API."""
import time

import torch

from common import emit, implementation, load

CODECS = ["NONE", "FLOAT16", "MEANSTD_16BIT", "UNIFORM_8BIT", "QUANTILE_8BIT", "BLOCKWISE_8BIT"]


def main():
    parser = implementation()
    parser.add_argument("--size", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.impl == "apiary":
        compression = load("apiary.compression")
        types = compression.CompressionType
    else:
        compression = load("hivemind.compression")
        types = load("hivemind.proto.runtime_pb2").CompressionType
    torch.manual_seed(0)
    x = torch.randn(args.size)
    for name in CODECS:
        codec = getattr(types, name)
        try:
            message = compression.serialize_torch_tensor(x, codec)
            compression.deserialize_torch_tensor(message)
        except Exception as e:  # noqa: BLE001 - e.g. hivemind's blockwise codec needs bitsandbytes
            emit({"bench": "compression", "codec": name, "error": f"{type(e).__name__}: {e}"[:200]})
            continue
        ser, de = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            message = compression.serialize_torch_tensor(x, codec)
            t1 = time.perf_counter()
            y = compression.deserialize_torch_tensor(message)
            t2 = time.perf_counter()
            ser.append(t1 - t0)
            de.append(t2 - t1)
        mse = torch.mean((x - y.float()) ** 2).item()
        emit({"bench": "compression", "codec": name, "serialize_ms": 1e3 * min(ser), "deserialize_ms": 1e3 * min(de),
              "bytes": len(message.buffer), "mse": mse})


if __name__ == "__main__":
    main()
