"""One peer of a collaborative training swarm: a PyTorch MLP on scikit-learn's digits,
trained with apiary.Optimizer (hivemind's Optimizer).

Peers of different speeds (--step-time) train one model: each accumulates gradients on
its own shard until the swarm has --target-batch-size samples, then they average their
gradients (weighted by samples) and take one optimizer step together: an epoch. A peer
that joins late or falls behind loads the state of the most advanced peer. With
--diloco the peers train locally (DiLoCo: apiary.optim.DiLoCo) and average compressed
pseudo-gradients every --inner-steps steps. Prints one line per epoch (samples/s of the
swarm, loss, held-out accuracy), a tqdm bar on stderr, and appends each epoch as a JSON
line to --log for the picture (scripts/swarm_plot.py).
"""
import argparse
import json
import sys
import time
from functools import partial

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
    shard = torch.arange(rank % peers, len(x_train), peers)
    return x_train[shard], y_train[shard], x_test, y_test


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int, required=True, help="which shard (modulo --peers) and name")
    parser.add_argument("--peers", type=int, required=True, help="shards of the training set")
    parser.add_argument("--initial-peers", nargs="*", default=[])
    parser.add_argument("--epochs", type=int, default=20, help="stop at this epoch of the swarm")
    parser.add_argument("--target-batch-size", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step (a slower peer)")
    parser.add_argument("--client-mode", action="store_true", help="a peer that only makes outbound connections")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--matchmaking-time", type=float, default=0.5,
                        help="seconds before an epoch's end that groups are formed (hivemind's default: 15)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", default=None, help="append one JSON line per epoch to this file")
    parser.add_argument("--diloco", action="store_true", help="DiLoCo: local steps, outer Nesterov on averages")
    parser.add_argument("--inner-steps", type=int, default=20, help="DiLoCo's H")
    parser.add_argument("--solo", action="store_true", help="train alone on rank 0's shard, the same samples")
    args = parser.parse_args()

    torch.manual_seed(args.seed)  # every peer starts from the same model
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    torch.manual_seed(args.seed * 1000 + args.rank + 1)
    x, y, x_test, y_test = data(args.rank, args.peers, args.seed)
    loss_fn = torch.nn.CrossEntropyLoss()
    name = "solo" if args.solo else f"peer {args.rank}"
    log = open(args.log, "a") if args.log else None

    def record(**fields) -> None:
        if log is not None:
            log.write(json.dumps(dict(rank=name, time=time.time(), **fields)) + "\n")
            log.flush()

    if args.solo:  # the same samples per epoch, one peer
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        steps_per_epoch = max(1, args.target_batch_size // args.batch)
        for epoch in range(1, args.epochs + 1):
            for _ in range(steps_per_epoch):
                batch = torch.randint(0, len(x), (args.batch,))
                loss_fn(model(x[batch]), y[batch]).mul(1.0 / steps_per_epoch).backward()
            opt.step()
            opt.zero_grad()
            with torch.no_grad():
                loss = loss_fn(model(x), y).item()
            record(epoch=epoch, loss=loss, accuracy=accuracy(model, x_test, y_test))
        print(f"{name} final: epoch {args.epochs}, loss {loss:.4f}, held-out accuracy "
              f"{accuracy(model, x_test, y_test):.4f}", flush=True)
        return 0

    dht = apiary.DHT(initial_peers=args.initial_peers, client_mode=args.client_mode)
    if not args.client_mode:  # a client-mode peer has no address to give
        print(f"listening {dht.get_visible_maddrs()[0]}", flush=True)
    if args.diloco:
        opt = apiary.optim.DiLoCo(
            dht=dht, run_id="digits_diloco", params=model.parameters(),
            inner_optimizer=partial(torch.optim.Adam, lr=1e-3), inner_steps=args.inner_steps,
            outer_lr=0.7, outer_momentum=0.9, compression=apiary.Uniform8BitQuantization(),
            matchmaking_time=2.0, averaging_timeout=30.0, target_group_size=args.peers,
            averager_opts=dict(request_timeout=1.0))
        if opt.load_state_from_peers():
            print(f"{name}: loaded the swarm's outer state at round {opt.local_epoch}", flush=True)
    else:
        opt = apiary.Optimizer(
            dht=dht, run_id="digits", target_batch_size=args.target_batch_size, batch_size_per_step=args.batch,
            params=model.parameters(), optimizer=partial(torch.optim.SGD, lr=args.lr, momentum=0.9),
            matchmaking_time=args.matchmaking_time, averaging_timeout=15.0, client_mode=args.client_mode,
            averager_opts=dict(request_timeout=1.0), tracker_opts=dict(min_refresh_period=0.2, max_refresh_period=2.0))
        if opt.load_state_from_peers():
            print(f"{name}: loaded the swarm's state at epoch {opt.local_epoch}", flush=True)
    record(event="join", epoch=opt.local_epoch)

    bar = tqdm(total=args.epochs, initial=min(opt.local_epoch, args.epochs), desc=name, position=args.rank,
               file=sys.stderr, leave=True, mininterval=0.5, dynamic_ncols=True)
    epoch, began, samples, steps = opt.local_epoch, time.monotonic(), 0, 0
    # DiLoCo: a peer left alone takes no outer steps; it stops after twice the inner steps.
    max_steps = 2 * args.epochs * args.inner_steps if args.diloco else None
    while opt.local_epoch < args.epochs and (max_steps is None or steps < max_steps):
        steps += 1
        if args.step_time:
            time.sleep(args.step_time)
        batch = torch.randint(0, len(x), (args.batch,))
        loss = loss_fn(model(x[batch]), y[batch])
        loss.backward()
        opt.step()
        opt.zero_grad()
        samples += args.batch
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if opt.local_epoch != epoch:
            now = time.monotonic()
            with torch.no_grad():
                full = loss_fn(model(x), y).item()
            acc = accuracy(model, x_test, y_test)
            swarm = (opt.local_epoch - epoch) * args.target_batch_size / (now - began) if not args.diloco else None
            rate = f", swarm {swarm:.0f} samples/s" if swarm else ""
            print(f"{name} epoch {opt.local_epoch}: loss {full:.4f}, held-out accuracy {acc:.3f}{rate}, "
                  f"{samples} samples here", flush=True)
            record(epoch=opt.local_epoch, loss=full, accuracy=acc, samples_per_second=swarm)
            bar.update(opt.local_epoch - epoch)
            epoch, began = opt.local_epoch, now
    bar.close()
    with torch.no_grad():
        final_loss = loss_fn(model(x), y).item()
    print(f"{name} final: epoch {opt.local_epoch}, loss {final_loss:.4f}, held-out accuracy "
          f"{accuracy(model, x_test, y_test):.4f}", flush=True)
    time.sleep(2.0)  # stay a little for peers still averaging or loading state
    opt.shutdown()
    dht.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
