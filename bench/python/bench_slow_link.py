"""Compute utilization over a slow link: two peers, each in a network namespace this
benchmark makes, joined by a link of 100 Mbit/s and 50 ms each way (by default; made by
bench/delay_line.cpp, a user-space tc netem over two TAP devices), train the same 4.2 M-parameter MLP on a synthetic regression task with
real compute. For each way it reports the share of wall time spent computing (forward,
backward and the torch optimizer's own step) over the steps after the first round, the
seconds per step, and the bytes each peer's transport moved.

  streaming   apiary.optim.DiLoCo, streaming=True: H inner Adam steps, 8-bit pseudo-
              gradients averaged during the next H steps, applied one round late
  diloco      the same, not streaming: the peers wait for each round's average
  plain       apiary.Optimizer averaging uncompressed gradients every step

Needs root (ip netns, /dev/net/tun); without it the benchmark says so and exits 0. Addresses
exist only inside the namespaces. Usage (as root):
  PYTHONPATH=build/python /usr/bin/python3 bench/python/bench_slow_link.py [--ways ...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
SUBNET = "10.231.7"
IN, HIDDEN, BATCH = 1024, 2048, 64


def sh(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


class Link:
    """Two namespaces on one L2 segment through apiary_delay_line: two TAP devices whose
    frames cross a link of the given rate and one-way delay (tc netem's job; this kernel
    may have no sch_netem)."""

    def __init__(self, delay_line, rate_mbit, delay_ms):
        tag = f"{os.getpid() % 100000}"
        self.ns = [f"apiary_sl{tag}_a", f"apiary_sl{tag}_b"]
        self.dev = [f"sla{tag}", f"slb{tag}"]
        self.addr = [f"{SUBNET}.1", f"{SUBNET}.2"]
        self.line = None
        try:
            for ns in self.ns:
                sh("ip", "netns", "add", ns)
            self.line = subprocess.Popen([delay_line, "--taps", *self.dev, "--rate-mbit", str(rate_mbit),
                                          "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE, text=True)
            if self.line.stdout.readline().strip() != "ready":
                raise RuntimeError("apiary_delay_line did not start")
            for ns, dev, addr in zip(self.ns, self.dev, self.addr):
                sh("ip", "link", "set", dev, "netns", ns)
                sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
                sh("ip", "-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.line is not None and self.line.poll() is None:
            self.line.terminate()
            print(self.line.communicate(timeout=10)[0].strip())
        for ns in self.ns:
            sh("ip", "netns", "del", ns, check=False)


def peer(args):
    """One trainer (run inside its namespace)."""
    import torch
    from functools import partial

    import apiary

    rank = args.rank
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, IN))
    teacher = torch.nn.Linear(IN, IN)
    torch.manual_seed(rank + 1)
    listen = [f"/ip4/{SUBNET}.{rank + 1}/tcp/0"]
    if rank == 0:
        dht = apiary.DHT(host_maddrs=listen)
        with open(args.addr_file + ".tmp", "w") as f:
            json.dump(dict(peers=dht.get_visible_maddrs(), start_at=time.time() + 8), f)
        os.rename(args.addr_file + ".tmp", args.addr_file)
    while not os.path.exists(args.addr_file):
        time.sleep(0.1)
    with open(args.addr_file) as f:
        meeting = json.load(f)
    if rank != 0:
        dht = apiary.DHT(initial_peers=meeting["peers"], host_maddrs=listen)
    run_id = f"slow_{args.way}"
    if args.way in ("streaming", "diloco"):
        opt = apiary.optim.DiLoCo(dht=dht, run_id=run_id, params=model.parameters(),
                                  inner_optimizer=lambda p: torch.optim.Adam(p, lr=1e-3), inner_steps=args.inner_steps,
                                  compression=apiary.Uniform8BitQuantization(), streaming=args.way == "streaming",
                                  matchmaking_time=2.0, averaging_timeout=120.0, target_group_size=2,
                                  averager_opts=dict(request_timeout=1.0))
        torch_opt, native = opt.inner, opt.averager
    else:
        opt = apiary.Optimizer(dht=dht, run_id=run_id, target_batch_size=2 * BATCH, batch_size_per_step=BATCH,
                               params=model.parameters(), optimizer=partial(torch.optim.Adam, lr=1e-3),
                               matchmaking_time=2.0, averaging_timeout=120.0, average_state_every=1000,
                               averager_opts=dict(request_timeout=1.0),
                               tracker_opts=dict(min_refresh_period=0.1, max_refresh_period=0.5))
        torch_opt, native = opt.opt, opt.grad_averager
    inner = [0.0]
    original = torch_opt.step

    def timed_step(*a, **k):
        began = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            inner[0] += time.perf_counter() - began

    torch_opt.step = timed_step
    time.sleep(max(0.0, meeting["start_at"] - time.time()))
    compute = 0.0
    steps = args.steps
    warm = args.inner_steps if args.way != "plain" else 2  # the first round (or steps) set things up
    began = None
    for step in range(steps):
        if step == warm:
            began, compute, inner[0] = time.perf_counter(), 0.0, 0.0
        t0 = time.perf_counter()
        x = torch.randn(BATCH, IN)
        loss = torch.nn.functional.mse_loss(model(x), teacher(x).detach())
        loss.backward()
        compute += time.perf_counter() - t0
        opt.step()
        opt.zero_grad()
    wall = time.perf_counter() - began
    sent, received = native._native.transport_bytes()
    result = dict(rank=rank, way=args.way, steps=steps - warm, wall=wall, compute=compute + inner[0],
                  utilization=(compute + inner[0]) / wall, seconds_per_step=wall / (steps - warm),
                  bytes=sent + received, loss=float(loss))
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")
    time.sleep(3.0)  # the other peer may still be finishing a round with this one
    opt.shutdown()
    dht.shutdown()


def run_way(link, way, args):
    folder = tempfile.mkdtemp()
    addr_file, out = os.path.join(folder, "addr.json"), os.path.join(folder, "out.jsonl")
    steps = args.plain_steps if way == "plain" else args.steps
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, UCX_NET_DEVICES=link.dev[rank], UCX_WARN_UNUSED_ENV_VARS="n")
        cmd = ["ip", "netns", "exec", link.ns[rank], sys.executable, HERE, "--peer", "--rank", str(rank), "--way", way,
               "--addr-file", addr_file, "--out", out, "--steps", str(steps), "--inner-steps", str(args.inner_steps)]
        procs.append(subprocess.Popen(cmd, env=env))
    for p in procs:
        try:
            p.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
    rows = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
    return way, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ways", nargs="*", default=["streaming", "diloco", "plain"])
    parser.add_argument("--rate-mbit", type=float, default=100.0, help="megabits per second of each direction")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="one-way delay of each direction")
    parser.add_argument("--delay-line", default=os.path.join(os.path.dirname(HERE), "..", "..", "build", "bin",
                                                             "apiary_delay_line"))
    parser.add_argument("--steps", type=int, default=140, help="steps of the DiLoCo ways")
    parser.add_argument("--plain-steps", type=int, default=12, help="steps of plain gradient averaging")
    parser.add_argument("--inner-steps", type=int, default=20, help="DiLoCo's H")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--way", default="streaming", help=argparse.SUPPRESS)
    parser.add_argument("--addr-file", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        peer(args)
        return 0
    if os.geteuid() != 0 or sh("ip", "netns", "list", check=False).returncode != 0:
        print("skipped: making network namespaces and their link needs root (ip netns, /dev/net/tun)")
        return 0
    link = Link(args.delay_line, args.rate_mbit, args.delay_ms)
    try:
        results = [run_way(link, way, args) for way in args.ways]
    finally:
        link.close()
    print(f"link: {args.rate_mbit:g} Mbit/s and {args.delay_ms:g} ms each way, 2 peers, "
          f"MLP {IN}-{HIDDEN}-{IN} ({(IN * HIDDEN * 2 + HIDDEN + IN) / 1e6:.1f} M parameters), batch {BATCH}")
    print(f"{'way':10} {'utilization':>12} {'s/step':>8} {'MB moved/step':>14} {'final loss':>11}")
    for way, rows in results:
        if len(rows) != 2:
            print(f"{way:10} failed: {len(rows)} of 2 peers reported")
            continue
        util = min(r["utilization"] for r in rows)
        per_step = max(r["seconds_per_step"] for r in rows)
        moved = sum(r["bytes"] for r in rows) / 2 / 1e6 / max(1, rows[0]["steps"] + (args.inner_steps if way != "plain" else 2))
        print(f"{way:10} {100 * util:>11.1f}% {per_step:>8.3f} {moved:>14.2f} {max(r['loss'] for r in rows):>11.4f}")
        print("RESULT " + json.dumps(dict(way=way, peers=rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
