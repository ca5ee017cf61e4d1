"""Ways of training together, side by side in one run (apiary): 4 peers each on its own
shard of scikit-learn's digits, with the same per-peer compute (batch 32, a fixed compute
time per step), against 1 peer alone with that compute on all the data. For each way:
seconds and samples until peer 0's model reaches the target held-out accuracy, bytes
per sample (all traffic of all peers' transports over all samples trained), epochs.

  plain      apiary.Optimizer, gradients (and the state, every epoch) averaged uncompressed
  fp16       the same, Float16Compression for gradients and state
  8bit       the same, Uniform8BitQuantization for gradients and state
  powersgd   the same as plain, gradients averaged by apiary.optim.PowerSGDGradientAverager (rank 4)
  diloco     apiary.optim.DiLoCo, H inner Adam steps, 8-bit pseudo-gradients

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python/bench_collab.py [--ways ...]
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time

from common import digits

PEERS, BATCH, STEP_TIME, HIDDEN = 4, 32, 0.01, 512  # the MLP: 64 -> 512 -> 10, 38 k parameters


def peer(way, rank, initial_peers, stop_path, out_path, target, cap_s, inner_steps, epoch_steps, start_at,
         state_every):
    import torch
    from functools import partial

    import apiary

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10))
    torch.manual_seed(rank + 1)
    solo = way == "solo"
    x, y, x_test, y_test = digits(0 if solo else rank, 1 if solo else PEERS, stratify=True)
    dht = opt = None
    transport = None
    if solo:
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    else:
        dht = apiary.DHT(initial_peers=initial_peers)
        if way == "diloco":
            opt = apiary.optim.DiLoCo(dht=dht, run_id=f"collab_{way}", params=model.parameters(),
                                      inner_optimizer=lambda p: torch.optim.Adam(p, lr=3e-3), inner_steps=inner_steps,
                                      compression=apiary.Uniform8BitQuantization(), matchmaking_time=3.0,
                                      averaging_timeout=30.0, target_group_size=PEERS,
                                      averager_opts=dict(request_timeout=1.0))
            transport = opt.averager._native
        else:
            codec = {"plain": apiary.NoCompression(), "fp16": apiary.Float16Compression(),
                     "8bit": apiary.Uniform8BitQuantization(), "powersgd": apiary.NoCompression()}[way]
            factory = partial(apiary.optim.PowerSGDGradientAverager, averager_rank=4) if way == "powersgd" else None
            opt = apiary.Optimizer(dht=dht, run_id=f"collab_{way}", target_batch_size=PEERS * BATCH * epoch_steps,
                                   batch_size_per_step=BATCH, params=model.parameters(),
                                   optimizer=partial(torch.optim.Adam, lr=3e-3 * PEERS),
                                   grad_compression=codec, state_averaging_compression=codec,
                                   grad_averager_factory=factory, average_state_every=state_every,
                                   matchmaking_time=0.5, averaging_timeout=15.0,
                                   averager_opts=dict(request_timeout=1.0),
                                   tracker_opts=dict(min_refresh_period=0.1, max_refresh_period=0.5))
            transport = opt.grad_averager._native
    time.sleep(max(0.0, start_at - time.time()))
    began, steps, reached = time.monotonic(), 0, None
    while not os.path.exists(stop_path) and time.monotonic() - began < cap_s:
        time.sleep(STEP_TIME)  # the same compute per step everywhere
        batch = torch.randint(0, len(x), (BATCH,))
        torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
        opt.zero_grad()
        steps += 1
        if rank == 0 and steps % 5 == 0 and reached is None:
            with torch.no_grad():
                accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
            if accuracy >= target:
                reached = time.monotonic() - began
                open(stop_path, "w").close()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    sent, received = transport.transport_bytes() if transport is not None else (0, 0)
    epochs = getattr(opt, "local_epoch", None)
    with open(out_path, "a") as f:
        f.write(json.dumps(dict(rank=rank, steps=steps, reached=reached, accuracy=accuracy, bytes=sent + received,
                                epochs=epochs)) + "\n")
    time.sleep(2.0)
    if hasattr(opt, "shutdown"):
        opt.shutdown()
    if dht is not None:
        dht.shutdown()


def run(way, target, cap_s, inner_steps, epoch_steps, state_every):
    import apiary

    folder = tempfile.mkdtemp()
    stop, out = os.path.join(folder, "stop"), os.path.join(folder, "out.jsonl")
    ctx = mp.get_context("spawn")
    root = apiary.DHT()
    n = 1 if way == "solo" else PEERS
    start_at = time.time() + 15
    procs = [ctx.Process(target=peer, args=(way, r, root.get_visible_maddrs(), stop, out, target, cap_s, inner_steps,
                                             epoch_steps, start_at, state_every)) for r in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(cap_s + 120)
        if p.is_alive():
            p.kill()
    root.shutdown()
    rows = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
    first = next((r for r in rows if r["rank"] == 0), None)
    samples = sum(r["steps"] for r in rows) * BATCH
    return dict(way=way, peers=n, seconds_to_target=first and first["reached"],
                samples_to_target=samples if first and first["reached"] else None,
                bytes_per_sample=(sum(r["bytes"] for r in rows) / samples) if samples and n > 1 else 0.0,
                final_accuracy=first and first["accuracy"], epochs=first and first["epochs"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ways", nargs="*", default=["solo", "plain", "fp16", "8bit", "powersgd", "diloco"])
    parser.add_argument("--target", type=float, default=0.93, help="held-out accuracy to reach")
    parser.add_argument("--cap", type=float, default=120.0, help="seconds per way at most")
    parser.add_argument("--inner-steps", type=int, default=20, help="DiLoCo's H")
    parser.add_argument("--epoch-steps", type=int, default=1,
                        help="steps per peer per epoch of the gradient-averaging ways")
    parser.add_argument("--average-state-every", type=int, default=1,
                        help="epochs between state averagings of the gradient-averaging ways (their bytes "
                             "then show the gradients' share)")
    args = parser.parse_args()
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    results = [run(w, args.target, args.cap, args.inner_steps, args.epoch_steps, args.average_state_every) for w in args.ways]
    plain = next((r for r in results if r["way"] == "plain"), None)
    print(f"{'way':8} {'peers':>5} {'s to target':>12} {'samples':>9} {'bytes/sample':>13} {'vs plain':>9} "
          f"{'accuracy':>9} {'epochs':>7}")
    for r in results:
        ratio = ""
        if plain and plain["bytes_per_sample"] and r["bytes_per_sample"]:
            ratio = f"{plain['bytes_per_sample'] / r['bytes_per_sample']:.1f}x less"
        s = "-" if r["seconds_to_target"] is None else f"{r['seconds_to_target']:.1f}"
        n = "-" if r["samples_to_target"] is None else str(r["samples_to_target"])
        acc = "-" if r["final_accuracy"] is None else f"{r['final_accuracy']:.3f}"
        print(f"{r['way']:8} {r['peers']:>5} {s:>12} {n:>9} {r['bytes_per_sample']:>13.1f} {ratio:>9} {acc:>9} "
              f"{str(r['epochs']):>7}")
        print("RESULT " + json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
