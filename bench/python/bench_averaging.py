"""Averaging workloads through one implementation's DecentralizedAverager API.

--workload swarm: hivemind's benchmark_averaging.py (16 peers in groups of 4, initial
group bits bin(i % 4), its per-peer model of 3 layers x (12h^2 + 19h) floats, h = 256,
about 2.37 M floats; Float16Compression; min_matchmaking_time 5 s, round timeout 15 s):
time per round and success rate.
--workload step: DecentralizedAverager.step on one float32 tensor of --mib MiB with
--peers peers (one group): time per step (after a warm-up step) and success rate.
Peers run as threads of this process; each has its own DHT.
"""
import resource
import statistics
import threading
import time
import warnings

import torch

from common import emit, implementation, load


def model_tensors(hid: int, layers: int):
    shapes = [(hid, 3 * hid), (3 * hid,), (3 * hid,), (hid, hid), (hid,), (hid,), (hid, 4 * hid), (4 * hid,),
              (4 * hid,), (2, hid, hid, 2), (hid,), (hid,), (hid,)]
    return [torch.randn(*shape) for _ in range(layers) for shape in shapes]


def main():
    parser = implementation()
    parser.add_argument("--workload", choices=["swarm", "step"], required=True)
    parser.add_argument("--peers", type=int, default=16)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=float, default=16)
    parser.add_argument("--hid", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    hm = load(args.impl)
    compression = load(f"{args.impl}.compression")
    swarm = args.workload == "swarm"
    group = args.group if swarm else args.peers
    bits = max(0, (args.peers // group).bit_length() - 1) if swarm else 0

    root = hm.DHT(start=True)
    boot = root.get_visible_maddrs()
    peers, averagers = [], []
    for i in range(args.peers):
        dht = hm.DHT(initial_peers=boot, start=True)
        tensors = model_tensors(args.hid, args.layers) if swarm else [torch.randn(int(args.mib * 2**20) // 4)]
        kwargs = dict(prefix="bench", target_group_size=group, min_group_size=2 if swarm else group,
                      min_matchmaking_time=5.0 if swarm else 1.0, request_timeout=1.0, start=True)
        if swarm:
            kwargs["initial_group_bits"] = format(i % (2**bits), f"0{bits}b") if bits else ""
            kwargs["compression"] = compression.Float16Compression()
        averagers.append(hm.DecentralizedAverager(tensors, dht, **kwargs))
        peers.append(dht)

    rounds = args.rounds + (0 if swarm else 1)  # the step workload warms up once
    times = [[None] * args.peers for _ in range(rounds)]
    barrier = threading.Barrier(args.peers)

    native = getattr(averagers[0], "_native", None)  # apiary: the process's transport counters
    bytes_at = {}

    def run(i):
        for r in range(rounds):
            barrier.wait()
            if i == 0 and native is not None:
                bytes_at[r] = sum(native.transport_bytes())
            t0 = time.perf_counter()
            try:
                result = averagers[i].step(timeout=15.0 if swarm else 60.0)
                ok = result is not None and len(result) >= 2
            except Exception:  # noqa: BLE001 - a failed round
                ok = False
            if ok:
                times[r][i] = time.perf_counter() - t0

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    threads = [threading.Thread(target=run, args=(i,)) for i in range(args.peers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    measured = times if swarm else times[1:]
    done = [t for round_times in measured for t in round_times if t is not None]
    record = {"bench": "averaging", "workload": args.workload, "peers": args.peers, "group": group,
              "success": len(done) / (len(measured) * args.peers),
              "round_mean_s": statistics.mean(done) if done else float("nan"),
              "round_max_s": max(done) if done else float("nan")}
    if not swarm:
        record["mib"] = args.mib
        if native is not None and 1 in bytes_at:
            record["transport_bytes_per_step"] = (sum(native.transport_bytes()) - bytes_at[1]) / args.rounds
        if native is not None:
            # Memory the steps added at their peak beyond the tensors (copies of them show
            # here; not for hivemind, whose averagers run in processes of their own).
            record["step_rss_growth_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024.0
    emit(record)
    for a in averagers:
        a.shutdown()
    for d in peers + [root]:
        d.shutdown()


if __name__ == "__main__":
    main()
