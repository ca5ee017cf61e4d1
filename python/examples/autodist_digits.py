"""A torch model trained with apiary.autodist, one process per replica: scikit-learn's
digits, an MLP over the 64 pixels plus an embedding (sparse gradients) of each image's
coarse shape (its 2x2-pooled, thresholded 4x4 picture: a 16-bit id). Replica 0 prints
the loss, the held-out accuracy and the step time; at the end it trains the same model in
one process on the same samples (each step's batches of every replica, concatenated) and
prints both accuracies.

    RANK=r python3 autodist_digits.py --builder PSLoadBalancing [--steps 120] [--port 15000]

With `--ps-processes` the PS devices are served by PS processes, each started with
`--serve DEVICE[,DEVICE...]` (`--print-ps-devices` lists the strategy's). scripts/ps_demo.sh
starts two, the devices dealt out between them, and the four replicas.
"""
import argparse
import os
import time

import numpy as np
import torch

import apiary
import apiary.strategy as strategies

SHAPES, EMBED, HIDDEN = 1 << 16, 16, 64


def load_digits():
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    data = sk_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    # The coarse shape: 2x2 mean pooling of the 8x8 image, thresholded, as a 16-bit id.
    pooled = x.reshape(-1, 4, 2, 4, 2).mean(dim=(2, 4)).reshape(-1, 16) > 0.3
    ids = (pooled.long() * (1 << torch.arange(16))).sum(dim=1)
    y = torch.tensor(data.target, dtype=torch.long)
    split = train_test_split(x, ids, y, test_size=0.25, random_state=0, stratify=y)
    return split[0], split[2], split[4], split[1], split[3], split[5]


class DigitsNet(torch.nn.Module):
    def __init__(self, sparse: bool):
        super().__init__()
        self.shape = torch.nn.Embedding(SHAPES, EMBED, sparse=sparse)
        self.hidden = torch.nn.Linear(64 + EMBED, HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, 10)

    def forward(self, x, ids):
        return self.out(torch.relu(self.hidden(torch.cat([x, self.shape(ids)], dim=1))))


def rows(step: int, replicas: int, rank: int, batch: int, n: int) -> torch.Tensor:
    """Replica `rank`'s sample indices at `step`: a fixed shuffle, consecutive slices."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(7))
    start = (step * replicas + rank) * batch
    return order[torch.arange(start, start + batch) % n]


def accuracy(model, x, ids, y) -> float:
    with torch.no_grad():
        return float((model(x, ids).argmax(dim=1) == y).float().mean())


def single_process(args, data, replicas: int) -> float:
    x, ids, y, xt, idt, yt = data
    torch.manual_seed(0)
    model = DigitsNet(sparse=True)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        r = torch.cat([rows(step, replicas, k, args.batch, len(x)) for k in range(replicas)])
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[r], ids[r]), y[r]).backward()
        opt.step()
    return accuracy(model, xt, idt, yt)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--builder", default="PSLoadBalancing")
    parser.add_argument("--resource-spec", default=os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                                                                  "ps", "resource_spec.yml"))
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--ps-processes", action="store_true", help="the PS devices have processes of their own")
    parser.add_argument("--serve", metavar="DEVICES", help="serve these PS devices (comma-separated) until killed "
                                                            "(no replica)")
    parser.add_argument("--print-ps-devices", action="store_true", help="print the strategy's PS devices and exit")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = load_digits()
    x, ids, y, xt, idt, yt = data
    torch.manual_seed(0)
    model = DigitsNet(sparse=True)
    ad = apiary.autodist.AutoDist(args.resource_spec, getattr(strategies, args.builder)(), port=args.port,
                                  ps_processes=args.ps_processes or bool(args.serve))
    sgd = torch.optim.SGD(model.parameters(), lr=args.lr)
    if args.print_ps_devices:
        print("\n".join(ad.ps_devices(model, sgd)))
        return
    if args.serve:
        ad.serve(model, sgd, args.serve.split(","))
        print(f"serving PS devices {args.serve}", flush=True)
        while True:  # until the demo stops it
            time.sleep(1)
    opt = ad.distribute(model, sgd)
    rank, replicas = opt.rank, opt.num_replicas
    if rank == 0:
        where = "PS processes" if args.ps_processes else f"rank 0 serves PS devices {list(ad._native.served) or 'none'}"
        print(f"{args.builder}: {replicas} replicas, {where}")
        print(opt.summary, end="", flush=True)
    started = time.perf_counter()
    for step in range(args.steps):
        t0 = time.perf_counter()
        r = rows(step, replicas, rank, args.batch, len(x))
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[r], ids[r]), y[r])
        loss.backward()
        opt.step()
        if rank == 0 and (step % 20 == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {float(loss):.4f}  held-out accuracy {accuracy(model, xt, idt, yt):.4f}  "
                  f"step {1000 * (time.perf_counter() - t0):.1f} ms", flush=True)
    elapsed = time.perf_counter() - started
    final = accuracy(model, xt, idt, yt)
    ad.shutdown()
    if rank == 0:
        alone = single_process(args, data, replicas)
        print(f"{args.builder}: {args.steps} steps in {elapsed:.1f} s ({1000 * elapsed / args.steps:.1f} ms/step), "
              f"{replicas * args.batch * args.steps / elapsed:.0f} samples/s; held-out accuracy {final:.4f}, "
              f"single process on the same samples {alone:.4f}", flush=True)
        if abs(final - alone) > 0.01:
            raise SystemExit(f"the accuracies differ by more than 0.01: {final:.4f} vs {alone:.4f}")


if __name__ == "__main__":
    main()
