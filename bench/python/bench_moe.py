"""`apiary bench experts`' workload through each implementation's Python API: the same
torch module (experts_workload.py's ApiaryFfn: Linear(h, 4h), ReLU, Linear(4h, h), SGD lr
0.01) served by `apiary.moe.Server` or hivemind's `Server`, called by C client processes
through `apiary.moe.RemoteExpert` or hivemind's, forward then backward with gradient
ones, batches to experts drawn as apiary draws them. samples/s from the moment every
client is connected to the last one's last answer (run.sh pairs the two RESULT lines).

Usage: bench_moe.py --impl apiary|hivemind [--preset minimalistic|ffn_small_batch|default|tiny]
"""
import multiprocessing as mp
import time

import torch

from common import emit, implementation, load
from experts_workload import ApiaryFfn, expert_of_batch

# (experts, hidden, clients, batches, rows, forward only): bench/experts_bench.cpp's presets.
PRESETS = {
    "minimalistic": (1, 1024, 1, 1, 2048, False),
    "ffn_small_batch": (4, 1024, 8, 8, 32, True),
    "default": (16, 1024, 4, 2, 128, False),
    "tiny": (2, 64, 2, 4, 16, False),
}


def backends(moe, descriptor, experts, hidden, max_batch):
    out = {}
    for i in range(experts):
        torch.manual_seed(1 + i)
        module = ApiaryFfn(hidden)
        out[f"expert.{i}"] = moe.ModuleBackend(name=f"expert.{i}", module=module,
                                               optimizer=torch.optim.SGD(module.parameters(), lr=0.01),
                                               args_schema=(descriptor(hidden),), outputs_schema=descriptor(hidden),
                                               max_batch_size=max_batch)
    return out


def remote_experts(impl, maddrs, where, experts):
    """Client-side RemoteExperts of `impl` (`where`: the server's address or PeerID)."""
    if impl == "apiary":
        import apiary
        from apiary.moe import ExpertInfo, RemoteExpert

        dht = apiary.DHT(initial_peers=maddrs, start=True)
        return [RemoteExpert(ExpertInfo(f"expert.{i}", where), dht) for i in range(experts)]
    from hivemind.moe.client.expert import RemoteExpert
    from hivemind.moe.client.remote_expert_worker import RemoteExpertWorker
    from hivemind.moe.expert_uid import ExpertInfo
    from hivemind.p2p import P2P

    p2p = RemoteExpertWorker.run_coroutine(P2P.create(initial_peers=maddrs))
    return [RemoteExpert(ExpertInfo(uid=f"expert.{i}", peer_id=where), p2p) for i in range(experts)]


def client(impl, preset, index, maddrs, where, barrier, ends):
    torch.set_num_threads(1)
    experts, hidden, _, batches, rows, forward_only = PRESETS[preset]
    remote = remote_experts(impl, maddrs, where, experts)
    for expert in remote:
        _ = expert.info
    batch = torch.randn(rows, hidden, generator=torch.Generator().manual_seed(1000003 + index))
    barrier.wait()
    for b in range(batches):
        out = remote[expert_of_batch(1, index, b, experts)](batch)
        if not forward_only:
            out.sum().backward()
    ends.put(time.monotonic())


def serve(impl):
    """(server, dht, maddrs, where) with the preset's experts, started."""
    if impl == "apiary":
        import apiary
        from apiary import moe
        from apiary.moe.schema import BatchTensorDescriptor

        dht = apiary.DHT(start=True)
        return dht, moe, BatchTensorDescriptor, dht.get_visible_maddrs()
    from hivemind import DHT, moe
    from hivemind.utils.tensor_descr import BatchTensorDescriptor

    dht = DHT(start=True)
    return dht, moe, BatchTensorDescriptor, [str(a) for a in dht.get_visible_maddrs()]


def main():
    parser = implementation()
    parser.add_argument("--preset", choices=sorted(PRESETS), default="default")
    args = parser.parse_args()
    load(args.impl)
    experts, hidden, clients, batches, rows, _ = PRESETS[args.preset]
    dht, moe, descriptor, maddrs = serve(args.impl)
    mine = backends(moe, descriptor, experts, hidden, 4 * rows)
    if args.impl == "apiary":
        server = moe.Server(dht, mine, start=True)
        where = server.address
    else:
        server = moe.Server(dht, mine, num_connection_handlers=max(1, clients // 2), device="cpu")
        server.start()
        server.ready.wait()
        where = dht.peer_id
    ctx = mp.get_context("spawn")
    barrier, ends = ctx.Barrier(clients + 1), ctx.Queue()
    procs = [ctx.Process(target=client, args=(args.impl, args.preset, c, maddrs, where, barrier, ends), daemon=True)
             for c in range(clients)]
    for p in procs:
        p.start()
    barrier.wait(timeout=300)
    start = time.monotonic()
    last = max(ends.get(timeout=900) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    server.shutdown()
    if args.impl == "hivemind":
        server.join()
    dht.shutdown()
    total = clients * batches * rows
    emit({"bench": "moe", "workload": args.preset, "samples_per_s": total / (last - start)})


if __name__ == "__main__":
    main()
