"""apiary.autodist beside torch's DistributedDataParallel (gloo), same run, same machine:
4 trainer processes train the same model on the same data, and each way reports step
time and samples/s.

- dense: a 100 MiB MLP (two 3584 x 3584 layers and a head), batch 8 per replica: the
  gradients are all the traffic. AllReduce and PSLoadBalancing beside DDP.
- sparse: a 1M x 32 embedding (128 MiB) looked up by 64 ids per replica, and a small head:
  each step touches a few hundred rows. PSLoadBalancing, Parallax and AllReduce (the
  embedding's rows gathered) with nn.Embedding(sparse=True), beside DDP, which
  all-reduces the whole embedding gradient.

A way "<builder>/shm" runs that builder with transport="shm" (UCX's shared-memory lanes
between the processes instead of TCP sockets; DDP's gloo has TCP only).

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python/bench_autodist.py
           [--models dense sparse] [--ways ddp AllReduce AllReduce/shm PSLoadBalancing Parallax] [--steps N]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPLICAS = 4


def make_model(kind: str, sparse: bool):
    import torch

    torch.manual_seed(0)
    if kind == "dense":
        return torch.nn.Sequential(torch.nn.Linear(3584, 3584), torch.nn.ReLU(), torch.nn.Linear(3584, 3584),
                                   torch.nn.ReLU(), torch.nn.Linear(3584, 10))

    class Sparse(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(1_000_000, 32, sparse=sparse)
            self.head = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

        def forward(self, ids):
            return self.head(self.embedding(ids).mean(dim=1))

    return Sparse()


def make_batch(kind: str, step: int, rank: int):
    import torch

    g = torch.Generator().manual_seed(step * REPLICAS + rank)
    if kind == "dense":
        return torch.randn(8, 3584, generator=g), torch.randint(0, 10, (8,), generator=g)
    return torch.randint(0, 1_000_000, (64, 8), generator=g), torch.randint(0, 10, (64,), generator=g)


def trainer(args) -> None:
    """One trainer process (--rank) of one way; writes its step times as JSON."""
    import torch

    torch.set_num_threads(1)  # four trainers share the machine's cores, as every way does
    rank = args.rank
    sparse = args.model == "sparse" and args.way != "ddp"
    model = make_model(args.model, sparse)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.way == "ddp":
        import torch.distributed as dist

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=REPLICAS)
        net = torch.nn.parallel.DistributedDataParallel(model)
        step_fn = opt.step
    else:
        import apiary
        import apiary.strategy as strategies

        builder, _, transport = args.way.partition("/")  # "AllReduce/shm": over shared memory
        ad = apiary.autodist.AutoDist(args.spec, getattr(strategies, builder)(), rank=rank, port=args.port,
                                      timeout=120.0, patience=300.0, transport=transport or "tcp")
        opt = ad.distribute(model, opt)
        net = model
        step_fn = opt.step
    times = []
    for step in range(args.steps):
        x, y = make_batch(args.model, step, rank)
        start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        step_fn()
        times.append(time.perf_counter() - start)
        if args.way != "ddp" and os.environ.get("BENCH_VERBOSE"):
            print(rank, step, {k: round(v, 4) for k, v in opt.last_step_seconds.items()}, flush=True)
    if args.way == "ddp":
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    else:
        ad.shutdown()
    with open(args.out, "w") as f:
        json.dump(dict(times=times), f)


def run_way(model: str, way: str, steps: int, spec: str, folder: str) -> dict:
    port = random.randrange(20000, 32000)  # below the ephemeral ports of outgoing connections
    procs = []
    outs = []
    for rank in range(REPLICAS):
        out = os.path.join(folder, f"{model}.{way.replace('/', '-')}.{rank}.json")
        outs.append(out)
        cmd = [sys.executable, os.path.abspath(__file__), "--trainer", "--rank", str(rank), "--model", model,
               "--way", way, "--steps", str(steps), "--port", str(port), "--spec", spec, "--out", out]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    logs = [p.communicate(timeout=1800)[0].decode(errors="replace") for p in procs]
    if any(p.returncode != 0 for p in procs):
        bad = next(i for i, p in enumerate(procs) if p.returncode != 0)
        print(f"{model} {way}: trainer {bad} failed:\n{logs[bad][-2000:]}", file=sys.stderr)
        return dict(model=model, way=way, failed=True)
    if os.environ.get("BENCH_VERBOSE"):  # each step's parts, as rank 0 timed them
        print(logs[0][-4000:], file=sys.stderr)
    times = [json.load(open(o))["times"] for o in outs]
    warm = max(1, steps // 5)  # the first steps warm the caches and connections
    per_step = [max(t[s] for t in times) for s in range(warm, steps)]  # a step ends when the slowest replica's does
    per_step.sort()
    median = per_step[len(per_step) // 2]
    batch = 8 if model == "dense" else 64
    return dict(model=model, way=way, step_s=median, samples_per_s=REPLICAS * batch / median)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["dense", "sparse"])
    parser.add_argument("--ways", nargs="*",
                        default=["ddp", "AllReduce", "AllReduce/shm", "PSLoadBalancing", "Parallax"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--spec", default=os.path.join(HERE, "..", "..", "examples", "ps", "resource_spec.yml"))
    parser.add_argument("--trainer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--model", default="dense", help=argparse.SUPPRESS)
    parser.add_argument("--way", default="ddp", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
    if args.trainer:
        trainer(args)
        return
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models:
            for way in args.ways:
                if model == "dense" and way.startswith("Parallax"):
                    continue  # without sparse variables Parallax is AllReduce
                r = run_way(model, way, args.steps, os.path.abspath(args.spec), folder)
                results.append(r)
                print("RESULT " + json.dumps(r), flush=True)
    print(f"\n{'model':8} {'way':16} {'step s':>10} {'samples/s':>10} {'vs DDP':>8}")
    for r in results:
        if r.get("failed"):
            print(f"{r['model']:8} {r['way']:16} {'failed':>10}")
            continue
        ddp = next((d for d in results if d["model"] == r["model"] and d["way"] == "ddp" and not d.get("failed")), None)
        ratio = f"{ddp['step_s'] / r['step_s']:.2f}x" if ddp else "-"
        print(f"{r['model']:8} {r['way']:16} {r['step_s']:10.4f} {r['samples_per_s']:10.1f} {ratio:>8}")


if __name__ == "__main__":
    main()
