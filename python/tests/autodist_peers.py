"""A trainer process of test_autodist.py: trains the small model of `make_model` with
apiary.autodist for each builder given, one job after the other, and writes its final
parameters (and the strategy's summary) per builder. Its rank comes from RANK (as
torchrun sets it). Run as a script:

    RANK=r WORLD_SIZE=n python3 autodist_peers.py --spec S --port P --builders PS,AllReduce --out DIR
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

import apiary
import apiary.strategy as strategies

FEATURES, IDS, EMBED, HIDDEN, CLASSES = 10, 40, 4, 8, 3


class Net(torch.nn.Module):
    """Features and an id looked up in an embedding (sparse gradients when `sparse`)."""

    def __init__(self, sparse: bool):
        super().__init__()
        self.embedding = torch.nn.Embedding(IDS, EMBED, sparse=sparse)
        self.hidden = torch.nn.Linear(FEATURES + EMBED, HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x, ids):
        h = torch.cat([x, self.embedding(ids)], dim=1)
        return self.out(torch.relu(self.hidden(h)))


def make_model(seed: int, sparse: bool) -> Net:
    torch.manual_seed(seed)
    return Net(sparse)


def make_data(samples: int = 1024):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, FEATURES, generator=g)
    ids = torch.randint(0, IDS, (samples,), generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] + (ids % 3).float() > 0.5).long() + (x[:, 2] > 1.0).long()
    return x, ids, y


def batch(data, step: int, replicas: int, rank: int, size: int):
    """Replica `rank`'s rows of step `step`: the step's replicas * size rows, in rank order."""
    x, ids, y = data
    start = (step * replicas + rank) * size % len(x)
    return x[start:start + size], ids[start:start + size], y[start:start + size]


def make_optimizer(kind: str, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.2)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)
    return torch.optim.Adam(params, lr=0.01)


def make_schedule(optimizer):
    """The learning-rate schedule of the schedule tests: halved every 2 steps."""
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def builder_of(name: str, staleness: int = 0, sync: bool = True):
    if name.startswith("PS") or name in ("PartitionedPS", "UnevenPartitionedPS", "Parallax"):
        return getattr(strategies, name)(staleness=staleness, sync=sync)
    return getattr(strategies, name)()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--port", type=int, default=os.environ.get("APIARY_PORT"),
                        required="APIARY_PORT" not in os.environ, help="default: APIARY_PORT (apiary launch sets it)")
    parser.add_argument("--builders", required=True)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--sparse", type=int, default=1)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--out", required=True)
    parser.add_argument("--die-at-step", type=int, default=-1, help="this process exits at that step")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--save", help="replica 0 writes the job's state_dict() here after the last step")
    parser.add_argument("--load", help="every replica starts the job from this state_dict()")
    parser.add_argument("--first-step", type=int, default=0, help="the data step of the first step")
    parser.add_argument("--staleness", type=int, default=0)
    parser.add_argument("--async", dest="asynchronous", action="store_true")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds this replica sleeps per step")
    parser.add_argument("--ps-processes", action="store_true", help="the PS devices have processes of their own")
    parser.add_argument("--insecure", action="store_true", help="plaintext connections (every process says so)")
    parser.add_argument("--schedule", action="store_true", help="a StepLR schedule on the optimizer")
    parser.add_argument("--grads", default="bound", choices=["bound", "mixed"],
                        help="mixed: odd steps set the gradients to None before backward, steps 2, 6, ... "
                             "replace each .grad by a copy after it (both copied on push)")
    parser.add_argument("--serve", help="serve these PS devices (comma-separated) of the first builder's job until "
                                        "killed")
    parser.add_argument("--resume", help="with --serve: a PS process started again, from this state_dict()")
    parser.add_argument("--drop-lost-after", type=float, help="seconds after which a lost replica is dropped")
    parser.add_argument("--ps-restart-wait", type=float, default=0.0, help="seconds to wait for a PS process")
    parser.add_argument("--replay-steps", type=int, default=0)
    parser.add_argument("--checkpoint-at", type=int, default=-1,
                        help="replica 0 writes the job's state_dict() to --checkpoint at the start of that step")
    parser.add_argument("--checkpoint")
    parser.add_argument("--rejoin", action="store_true",
                        help="a replica started again after the job dropped it: trains from the step it rejoins at")
    args = parser.parse_args()
    recovery = dict(drop_lost_replicas_after=args.drop_lost_after, ps_restart_wait=args.ps_restart_wait,
                    replay_steps=args.replay_steps)
    rejoin = dict(rejoin=True) if args.rejoin else {}
    if args.serve:
        model = make_model(seed=999, sparse=bool(args.sparse))  # its values come from replica 0
        name = args.builders.split(",")[0]
        ad = apiary.autodist.AutoDist(args.spec, builder_of(name), insecure=args.insecure, port=args.port, job=f"test.{name}",
                                      timeout=args.timeout, patience=60.0, ps_processes=True, **recovery)
        ad.serve(model, make_optimizer(args.optimizer, model.parameters()), args.serve.split(","),
                 resume=torch.load(args.resume) if args.resume else None)
        while True:
            time.sleep(1)
    rank = int(os.environ["RANK"])
    data = make_data()
    for i, name in enumerate(args.builders.split(",")):
        # Each process starts from its own random model: the job starts from replica 0's.
        model = make_model(seed=100 + rank, sparse=bool(args.sparse))
        ad = apiary.autodist.AutoDist(args.spec, builder_of(name, args.staleness, not args.asynchronous), insecure=args.insecure, port=args.port + 40 * i, job=f"test.{name}",
                                      timeout=args.timeout, patience=60.0, ps_processes=args.ps_processes, **recovery,
                                      **rejoin)
        if args.load:
            ad.load_state_dict(torch.load(args.load))
        torch_opt = make_optimizer(args.optimizer, model.parameters())
        opt = ad.distribute(model, torch_opt)
        # A schedule on the torch optimizer: each step runs at its rate of the moment.
        schedule = make_schedule(torch_opt) if args.schedule else None
        losses, versions, bound = [], [], []
        first = opt.version  # the step this replica starts at: 0, or where it rejoined
        started = time.monotonic()
        try:
            for step in range(first, args.steps):
                if step == args.die_at_step:
                    os._exit(3)
                if step == args.checkpoint_at and rank == 0:
                    torch.save(ad.state_dict(), args.checkpoint + ".part")
                    os.rename(args.checkpoint + ".part", args.checkpoint)
                x, ids, y = batch(data, args.first_step + step, opt.num_replicas, rank, args.batch)
                opt.zero_grad(set_to_none=args.grads == "mixed" and step % 2 == 1)
                loss = torch.nn.functional.cross_entropy(model(x, ids), y)
                loss.backward()
                if args.grads == "mixed" and step % 4 == 2:
                    for p in model.parameters():
                        p.grad = p.grad.clone()
                # Whether every dense gradient is the job's own memory (pushed without a copy).
                bound.append(all(p.grad is not None and p.grad.data_ptr() == opt._arrays[n].ctypes.data
                                 for n, p in model.named_parameters() if n in opt._arrays))
                if args.step_sleep:
                    time.sleep(args.step_sleep)
                opt.step()
                if schedule is not None:
                    schedule.step()
                if step == 0:  # for a test that waits until every trainer trains
                    open(os.path.join(args.out, f"{name}.{rank}.started"), "w").close()
                losses.append(float(loss))
                versions.append(opt.version)
        except Exception as e:  # the error a failed job gives, for the test to read
            with open(os.path.join(args.out, f"{name}.{rank}.error"), "w") as f:
                f.write(f"{type(e).__name__}: {e}\nafter {time.monotonic() - started:.1f} s\n"
                        f"first step {first}, versions {versions}\n")
            return 1
        if args.save and rank == 0:
            torch.save(ad.state_dict(), args.save)
        params = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
        np.savez(os.path.join(args.out, f"{name}.{rank}.npz"), **params)
        with open(os.path.join(args.out, f"{name}.{rank}.json"), "w") as f:
            json.dump(dict(summary=opt.summary, served=list(ad._native.served), losses=losses, versions=versions,
                           bound=bound, first=first), f)
        ad.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
