"""One peer of a local training swarm: a PyTorch MLP on scikit-learn's digits.

Each peer trains on its own shard of the training set and, every few steps, averages
its parameters with a group of peers found through the DHT (apiary.DecentralizedAverager,
the trainer's parameter tensors averaged in place). With --solo it trains alone on the
shard of rank 0, for comparison. Prints one line per averaging round (group size, loss,
held-out accuracy) and a final line; shows a tqdm progress bar on stderr.
"""
import argparse
import sys
import time

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import apiary


def data(rank: int, peers: int, seed: int):
    digits = load_digits()  # ships with scikit-learn: nothing is downloaded
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    shard = torch.arange(rank, len(x_train), peers)
    return x_train[shard], y_train[shard], x_test, y_test


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--peers", type=int, required=True)
    parser.add_argument("--initial-peers", nargs="*", default=[])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--average-every", type=int, default=25)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--solo", action="store_true", help="train alone on rank 0's shard, no averaging")
    args = parser.parse_args()

    torch.manual_seed(args.seed)  # every peer starts from the same model
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    torch.manual_seed(args.seed * 1000 + args.rank + 1)
    x, y, x_test, y_test = data(0 if args.solo else args.rank, args.peers, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    name = "solo" if args.solo else f"peer {args.rank}"

    dht = averager = None
    if not args.solo:
        dht = apiary.DHT(initial_peers=args.initial_peers)
        print(f"listening {dht.get_visible_maddrs()[0]}", flush=True)
        averager = apiary.DecentralizedAverager(
            [p.data for p in model.parameters()], dht, start=True, prefix="digits", target_group_size=4,
            min_group_size=2, min_matchmaking_time=1.0, request_timeout=0.5,
        )

    loss = float("nan")
    bar = tqdm(range(1, args.steps + 1), desc=name, position=0 if args.solo else args.rank + 1, file=sys.stderr,
               leave=True, mininterval=0.5, dynamic_ncols=True)
    for step in bar:
        batch = torch.randint(0, len(x), (args.batch,))
        opt.zero_grad()
        out = loss_fn(model(x[batch]), y[batch])
        out.backward()
        opt.step()
        loss = out.item()
        bar.set_postfix(loss=f"{loss:.3f}")
        if averager is not None and step % args.average_every == 0:
            began = time.monotonic()
            try:
                gathered = averager.step(gather={"step": step}, timeout=10.0)
                group = len(gathered)
            except Exception as e:  # noqa: BLE001 - a lonely round is reported, training goes on
                group = 1
                print(f"{name} step {step}: no averaging this round ({type(e).__name__}: {e})", flush=True)
            with torch.no_grad():
                full = loss_fn(model(x), y).item()
            print(f"{name} step {step}: group of {group}, loss {full:.4f}, held-out accuracy "
                  f"{accuracy(model, x_test, y_test):.3f}, {time.monotonic() - began:.2f} s averaging", flush=True)
    bar.close()
    with torch.no_grad():
        final_loss = loss_fn(model(x), y).item()
    print(f"{name} final: loss {final_loss:.4f}, held-out accuracy {accuracy(model, x_test, y_test):.4f}", flush=True)
    if averager is not None:
        time.sleep(2.0)  # stay a little for groupmates finishing their last round
        averager.shutdown()
        dht.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
