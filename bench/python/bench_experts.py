"""hivemind's side of `apiary bench experts` (bench/experts_bench.hpp): the workload of
hivemind's benchmarks/benchmark_throughput.py on hivemind's own Server and RemoteExpert,
with an expert that computes exactly what apiary's FfnExpert does (Linear(h, 4h), ReLU,
Linear(4h, h), SGD lr 0.01), registered as hivemind's docs say (register_expert_class).

--mode throughput: a server with N experts and C client processes, each connecting,
asking every expert's info, then (all together) B batches of S rows to experts drawn as
apiary draws them, forward then backward with gradient ones (out.sum().backward());
samples/s from the moment every client is connected to the last one's last answer.
--mode bound: the same batches through the same ModuleBackend's forward and backward in
this process, no RPC.
Prints one line: "experts_peer mode=... samples_per_s=... rows=... seconds=...".
"""
import argparse
import multiprocessing as mp
import time

import torch

from experts_workload import ApiaryFfn, expert_of_batch
from hivemind import DHT
from hivemind.moe.client.expert import RemoteExpert
from hivemind.moe.client.remote_expert_worker import RemoteExpertWorker
from hivemind.moe.expert_uid import ExpertInfo
from hivemind.moe.server import ModuleBackend, Server
from hivemind.moe.server.layers import name_to_block
from hivemind.moe.server.layers.custom_experts import register_expert_class
from hivemind.p2p import P2P
from hivemind.utils.tensor_descr import BatchTensorDescriptor

# The same module as FfnExpert, served as hivemind's docs say (register_expert_class).
register_expert_class("apiary_ffn", lambda batch_size, hid_dim: torch.empty((batch_size, hid_dim)))(ApiaryFfn)


def batch_of(args, client):
    """Client `client`'s batch, sent every time (upstream's dummy_batch)."""
    generator = torch.Generator().manual_seed(args.seed * 1000003 + client)
    return torch.randn(args.batch_size, args.hidden, generator=generator)


def make_backends(args):
    backends = {}
    for i in range(args.experts):
        torch.manual_seed(args.seed + i)
        module = name_to_block["apiary_ffn"](args.hidden)
        backends[f"expert.{i}"] = ModuleBackend(
            name=f"expert.{i}", module=module, optimizer=torch.optim.SGD(module.parameters(), lr=0.01),
            args_schema=(BatchTensorDescriptor(args.hidden),), outputs_schema=BatchTensorDescriptor(args.hidden),
            max_batch_size=args.max_batch_size)
    return backends


def client_process(args, client, maddrs, peer_id, server_up, barrier, ends, failed):
    torch.set_num_threads(1)  # as upstream's clients
    try:
        server_up.wait()
        p2p = RemoteExpertWorker.run_coroutine(P2P.create(initial_peers=maddrs))
        experts = [RemoteExpert(ExpertInfo(uid=f"expert.{i}", peer_id=peer_id), p2p) for i in range(args.experts)]
        for expert in experts:
            _ = expert.info  # connection and schema, outside the timed part
        batch = batch_of(args, client)
        barrier.wait()
        for b in range(args.batches):
            out = experts[expert_of_batch(args.seed, client, b, args.experts)](batch)
            if not args.forward_only:
                out.sum().backward()
        ends.put(time.monotonic())
    except BaseException:
        failed.set()
        barrier.abort()
        raise


def run_throughput(args):
    server_up, barrier, ends, failed = mp.Event(), mp.Barrier(args.clients + 1), mp.Queue(), mp.Event()
    dht = DHT(start=True)
    maddrs = [str(a) for a in dht.get_visible_maddrs()]
    # As upstream: the clients are forked before the server starts its threads.
    clients = [mp.Process(target=client_process, args=(args, c, maddrs, dht.peer_id, server_up, barrier, ends, failed),
                          daemon=True) for c in range(args.clients)]
    for c in clients:
        c.start()
    server = Server(dht, make_backends(args), num_connection_handlers=args.handlers, device="cpu")
    try:
        server.start()
        server.ready.wait()
        server_up.set()
        barrier.wait(timeout=300)
        start = time.monotonic()
        last = max(ends.get(timeout=900) for _ in clients)
        for c in clients:
            c.join()
    finally:
        for c in clients:
            if c.is_alive():
                c.terminate()
        server.shutdown()
        server.join()
        dht.shutdown()
    assert not failed.is_set(), "a client failed"
    return last - start


def run_bound(args):
    backends = list(make_backends(args).values())
    batches = [batch_of(args, c) for c in range(args.clients)]
    ones = torch.ones(args.batch_size, args.hidden)
    start = time.monotonic()
    for c in range(args.clients):
        for b in range(args.batches):
            backend = backends[expert_of_batch(args.seed, c, b, args.experts)]
            backend.forward(batches[c])
            if not args.forward_only:
                backend.backward(batches[c], ones)
    return time.monotonic() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["throughput", "bound"], required=True)
    for name, default in [("experts", 16), ("hidden", 1024), ("clients", 4), ("batches", 2), ("batch-size", 256),
                          ("max-batch-size", 1024), ("handlers", 2), ("seed", 1)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--forward-only", action="store_true")
    args = parser.parse_args()
    seconds = run_throughput(args) if args.mode == "throughput" else run_bound(args)
    rows = args.clients * args.batches * args.batch_size
    print(f"experts_peer mode={args.mode} samples_per_s={rows / seconds:.3f} rows={rows} seconds={seconds:.3f} "
          f"torch_threads={torch.get_num_threads()}", flush=True)


if __name__ == "__main__":
    main()
