"""The collaborative Optimizer through one implementation's API, after hivemind's
benchmark_optimizer.py scaled to a small machine: --peers peers in processes of their
own (the last --clients of them in client mode) train one MLP on scikit-learn's digits
(75/25 split, random_state=0; every peer starts from the same model, torch seed --seed, and samples
batches from its own shard of the training three quarters) with SGD(momentum 0.9), an
epoch per --target-batch-size samples of the swarm, reuse_grad_buffers and
average_state_every=1 as in hivemind's benchmark. Peers have batch sizes spread over
2..16 and simulated compute times spread over --batch-time-min..--batch-time-max s.

Warm-up (not timed): peer 0 starts; then the others start and load its state; all then
begin training together. The run ends at --epochs epochs or --max-seconds.

hivemind's benchmark also delays the gradient averaging and the optimizer step
(delay_grad_averaging, delay_optimizer_step: --delayed-updates). Here an epoch (a few
seconds) is about as long as an averaging round, so most of an epoch's gradients would
be computed on parameters one step old; with momentum 0.9 and lr 0.5 neither
implementation converged that way (held-out accuracy peaked near 0.8, then fell), so by
default the step waits for the average, and the time per epoch shows the whole
averaging round.

Figures (a RESULT line per family, both implementations run the same way):
  epochs:   epochs peer 0 reached, median and max wall seconds per epoch as peer 0 saw
            them, median/max Optimizer.step() seconds over all peers, the slowest peer's
            start (DHT, Optimizer, loading state), success (the share of peers that
            trained and shut down without error).
  traffic:  bytes sent + received by all peers (not the bootstrap node), per epoch,
            warm-up included. apiary: each peer process's transport counters (envelope
            + payload of the frames; its DHT and both averagers share the one transport,
            so they are read once per process). hivemind: the TCP payload bytes
            (tcp_info bytes_acked + bytes_received, from `ss -tinp`, polled every
            --poll-seconds) of the sockets owned by the peers' p2pd daemons, which carry
            all their DHT and averaging traffic; libp2p's framing and encryption are in
            it, bytes of a connection in its last poll interval before closing are not.
            The machine-wide loopback counters would count other processes, so they are
            not used.
  accuracy: seconds from the start of training to peer 0's model's first held-out
            accuracy >= --accuracy (checked after every step), the epoch it happened at,
            and peer 0's final held-out accuracy.
"""
import faulthandler
import multiprocessing as mp
import queue
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import traceback
import warnings
from functools import partial

from common import digits, emit, implementation, load, percentile

LOOPBACK = "/ip4/127.0.0.1/tcp/0"
RUN_ID = "bench_optimizer"


def mlp(hidden: int, seed: int = 0):
    """The model every peer starts from: 64 -> hidden -> 10, from torch seed `seed`."""
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def held_out_accuracy(model, x, y) -> float:
    import torch

    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def peer_shape(index: int, peers: int, batch_time_min: float, batch_time_max: float):
    """This peer's batch size (spread evenly over 2..16) and mean seconds per batch
    (spread over the range in a fixed shuffled order, so that batch size and speed are
    unrelated)."""
    batch_size = 2 + round(14 * index / max(1, peers - 1))
    slot = random.Random(0).sample(range(peers), peers)[index]
    batch_time = batch_time_min + (batch_time_max - batch_time_min) * slot / max(1, peers - 1)
    return batch_size, batch_time


def train(impl: str, index: int, cfg: dict, initial_peers, first_up, all_up):
    """One peer: joins the swarm (peer 0 first, then the others, loading its state),
    waits for all, trains until the epoch or cfg["max_seconds"]; returns what it
    measured, the optimizer and the DHT."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)  # 8 peers on a few cores
    warnings.simplefilter("ignore")
    if impl == "hivemind":  # its DHT and averagers are processes forked from this one, as on Linux by default
        mp.set_start_method("fork", force=True)
    hm = load(impl)
    x, y, x_test, y_test = digits(index, cfg["peers"])
    model = mlp(cfg["hidden"], cfg["seed"])
    batch_size, batch_time = peer_shape(index, cfg["peers"], cfg["batch_time_min"], cfg["batch_time_max"])
    client = index >= cfg["peers"] - cfg["clients"]
    rng = random.Random(index + 1000 * cfg["seed"])
    batches = torch.Generator().manual_seed(index + 1 + 1000 * cfg["seed"])
    if index > 0 and not first_up.wait(cfg["warmup_seconds"]):
        print(f"[peer {index}] {impl}: peer 0 not up after {cfg['warmup_seconds']} s; joining anyway", file=sys.stderr)

    joining = time.monotonic()
    dht = hm.DHT(initial_peers=initial_peers, client_mode=client, host_maddrs=[LOOPBACK], start=True)
    delayed = cfg["delayed_updates"]
    opt = hm.Optimizer(
        dht=dht, run_id=RUN_ID, target_batch_size=cfg["target_batch_size"], batch_size_per_step=batch_size,
        params=model.parameters(), optimizer=partial(torch.optim.SGD, lr=cfg["lr"], momentum=0.9),
        matchmaking_time=cfg["matchmaking_time"], averaging_timeout=cfg["averaging_timeout"],
        load_state_timeout=cfg["averaging_timeout"], reuse_grad_buffers=True, delay_grad_averaging=delayed,
        delay_optimizer_step=delayed, average_state_every=1, client_mode=client,
        averager_opts=dict(request_timeout=0.5), tracker_opts=dict(max_refresh_period=cfg["matchmaking_time"]),
        verbose=False)
    if index == 0:
        first_up.set()
    else:
        opt.load_state_from_peers()
    joined = time.monotonic()
    print(f"[peer {index}] {impl}: up at epoch {opt.local_epoch} in {joined - joining:.1f} s (batch {batch_size}, "
          f"{batch_time:.2f} s/batch{', client mode' if client else ''})", file=sys.stderr, flush=True)
    try:
        all_up.wait(max(1.0, cfg["warmup_seconds"] - (joined - joining)))
    except threading.BrokenBarrierError:
        print(f"[peer {index}] {impl}: not all peers up within the warm-up; training anyway", file=sys.stderr)

    started = time.monotonic()
    result = dict(index=index, client=client, batch_size=batch_size, batch_time=batch_time, join_s=joined - joining,
                  epochs=[(opt.local_epoch, 0.0)], step_s=[], samples=0, reached_s=None, reached_epoch=None)
    while opt.local_epoch < cfg["epochs"] and time.monotonic() - started < cfg["max_seconds"]:
        t0 = time.monotonic()
        rows = torch.randint(0, len(x), (batch_size,), generator=batches)
        F.cross_entropy(model(x[rows]), y[rows]).backward()
        time.sleep(max(0.0, rng.gauss(batch_time, 0.2 * batch_time) - (time.monotonic() - t0)))
        before = opt.local_epoch
        t1 = time.monotonic()
        opt.step()  # reuse_grad_buffers: no zero_grad, the optimizer resets the gradients
        now = time.monotonic()
        result["step_s"].append(now - t1)
        result["samples"] += batch_size
        if opt.local_epoch != before:
            result["epochs"].append((opt.local_epoch, now - started))
            if index == 0:
                print(f"[peer 0] {impl}: epoch {opt.local_epoch} at {now - started:.1f} s, held-out accuracy "
                      f"{held_out_accuracy(model, x_test, y_test):.3f}", file=sys.stderr, flush=True)
        if index == 0 and result["reached_s"] is None and held_out_accuracy(model, x_test, y_test) >= cfg["accuracy"]:
            result["reached_s"], result["reached_epoch"] = now - started, opt.local_epoch

    opt.state_averager.step(wait_for_delayed_updates=True)  # a delayed step or state average still running
    result["final_epoch"] = opt.local_epoch
    result["final_accuracy"] = held_out_accuracy(model, x_test, y_test)
    if impl == "apiary":  # the process's transport: its DHT and both averagers share it
        result["bytes"] = sum(opt.grad_averager._native.transport_bytes())
    return result, opt, dht


def peer(impl, index, cfg, initial_peers, first_up, all_up, results):
    """A spawned peer process: reports (index, "result", what it measured) or (index,
    "error", the error's text), then shuts down and reports (index, "shutdown", "ok" or
    the error's text). The shutdown runs on the thread that made the DHT, as a trainer's
    would (apiary's DHT stopped from another thread hangs in its runtime's teardown); when
    it takes over --shutdown-timeout s, the threads' stacks go to stderr."""
    try:
        result, opt, dht = train(impl, index, cfg, initial_peers, first_up, all_up)
    except BaseException as e:  # noqa: BLE001 - reported to the driver
        results.put((index, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        all_up.abort()  # the others need not wait for this one
        return
    results.put((index, "result", result))
    faulthandler.dump_traceback_later(cfg["shutdown_timeout"])
    try:
        opt.shutdown()
        dht.shutdown()
        status = "ok"
    except BaseException as e:  # noqa: BLE001 - reported to the driver
        status = f"{type(e).__name__}: {e}"
    faulthandler.cancel_dump_traceback_later()
    results.put((index, "shutdown", status))


class P2pdTraffic:
    """hivemind's peers' network bytes: polls `ss -tinp` for the TCP sockets of the p2pd
    daemons under the given processes and adds up each connection's payload bytes (a
    counter that goes back is a new connection on the same addresses)."""

    SOCKET = re.compile(r"^\S+\s+\d+\s+\d+\s+(\S+)\s+(\S+)\s+users:\(\(\"p2pd\",pid=(\d+)")
    COUNTERS = re.compile(r"\bbytes_acked:(\d+)|\bbytes_received:(\d+)")

    def __init__(self, pids, period: float):
        import psutil

        self.psutil, self.pids, self.period = psutil, list(pids), period
        self.last, self.closed, self.error = {}, 0, None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _daemons(self):
        found = set()
        for pid in self.pids:
            try:
                found.update(c.pid for c in self.psutil.Process(pid).children(recursive=True) if c.name() == "p2pd")
            except self.psutil.Error:
                continue
        return found

    def poll(self) -> None:
        daemons = self._daemons()
        if not daemons:
            return
        lines = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, timeout=10).stdout.splitlines()
        for head, info in zip(lines, lines[1:]):
            match = self.SOCKET.match(head)
            if not match or int(match.group(3)) not in daemons:
                continue
            count = sum(int(a or b) for a, b in self.COUNTERS.findall(info))
            key = match.groups()
            if count < self.last.get(key, 0):
                self.closed += self.last[key]
            self.last[key] = count

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 - e.g. no ss: the figure becomes n/a
                self.error = f"{type(e).__name__}: {e}"
                return

    def total(self) -> int:
        self.stop.set()
        self.thread.join()
        return self.closed + sum(self.last.values())


def kill_tree(process) -> None:
    """Kills a peer process that did not exit, and the processes it started (hivemind's
    DHT and averager processes, p2pd), which would otherwise outlive it."""
    import psutil

    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        children = []
    process.kill()
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass


def main():
    parser = implementation()
    parser.add_argument("--peers", type=int, default=8)
    parser.add_argument("--clients", type=int, default=3, help="the last CLIENTS peers run in client mode")
    parser.add_argument("--target-batch-size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--max-seconds", type=float, default=240.0, help="wall-clock cap on the training")
    parser.add_argument("--warmup-seconds", type=float, default=120.0, help="cap on the peers' start")
    parser.add_argument("--accuracy", type=float, default=0.9, help="the held-out accuracy to time")
    parser.add_argument("--seed", type=int, default=0,
                        help="the initial model's torch seed; each peer's batch order and compute times too")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--matchmaking-time", type=float, default=1.0)
    parser.add_argument("--averaging-timeout", type=float, default=15.0)
    parser.add_argument("--batch-time-min", type=float, default=0.1)
    parser.add_argument("--batch-time-max", type=float, default=0.45)
    parser.add_argument("--delayed-updates", action="store_true",
                        help="delay_grad_averaging and delay_optimizer_step, as hivemind's benchmark")
    parser.add_argument("--shutdown-timeout", type=float, default=30.0)
    parser.add_argument("--poll-seconds", type=float, default=0.5, help="hivemind: period of the ss poll")
    args = parser.parse_args()
    if not 0 <= args.clients < args.peers:
        parser.error("expected 0 <= --clients < --peers: peer 0 must serve (the others load its state)")
    warnings.simplefilter("ignore")
    hm = load(args.impl)
    cfg = dict(seed=args.seed, peers=args.peers, clients=args.clients, target_batch_size=args.target_batch_size, epochs=args.epochs,
               max_seconds=args.max_seconds, warmup_seconds=args.warmup_seconds, accuracy=args.accuracy, lr=args.lr,
               hidden=args.hidden, matchmaking_time=args.matchmaking_time, averaging_timeout=args.averaging_timeout,
               batch_time_min=args.batch_time_min, batch_time_max=args.batch_time_max,
               delayed_updates=args.delayed_updates, shutdown_timeout=args.shutdown_timeout)

    root = hm.DHT(start=True, host_maddrs=[LOOPBACK])  # the bootstrap node; it does not train
    initial_peers = [str(m) for m in root.get_visible_maddrs()]
    ctx = mp.get_context("spawn")
    results, first_up, all_up = ctx.Queue(), ctx.Event(), ctx.Barrier(args.peers)
    # Not daemonic: hivemind's peers start processes of their own (stragglers are killed below).
    procs = [ctx.Process(target=peer, args=(args.impl, i, cfg, initial_peers, first_up, all_up, results))
             for i in range(args.peers)]
    for p in procs:
        p.start()
    traffic = P2pdTraffic([p.pid for p in procs], args.poll_seconds) if args.impl == "hivemind" else None

    # Peers train for up to max_seconds after the warm-up, then may wait up to
    # averaging_timeout for a round; then they have shutdown_timeout to leave. Past
    # that they are stragglers.
    give_up = time.time() + 2 * args.warmup_seconds + args.max_seconds + 2 * args.averaging_timeout + 30
    done, errors, shutdowns = {}, {}, {}
    try:
        while time.time() < give_up and (len(done) + len(errors) < args.peers or len(shutdowns) < len(done)):
            try:
                index, kind, value = results.get(timeout=max(0.1, min(5.0, give_up - time.time())))
            except queue.Empty:
                continue
            {"result": done, "error": errors, "shutdown": shutdowns}[kind][index] = value
            if kind == "result":  # its shutdown is due within shutdown_timeout from now
                give_up = max(give_up, time.time() + args.shutdown_timeout + 10)
    finally:
        bytes_total = traffic.total() if traffic is not None else None
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                kill_tree(p)
        root.shutdown()

    for index, text in sorted(errors.items()):
        print(f"peer {index} failed: {text}", file=sys.stderr)
    for index in range(args.peers):
        if index not in done and index not in errors:
            print(f"peer {index} gave no result in time (killed)", file=sys.stderr)
        elif index in done and shutdowns.get(index) != "ok":
            print(f"peer {index} shutdown: {shutdowns.get(index, 'did not finish in time (killed)')}", file=sys.stderr)
    succeeded = sum(1 for index in done if shutdowns.get(index) == "ok")
    base = {"bench": "optimizer", "peers": args.peers}
    shape = dict(seed=args.seed, clients=args.clients, target_batch_size=args.target_batch_size, max_epochs=args.epochs,
                 delayed_updates=args.delayed_updates)
    lead = done.get(0)
    if lead is None:
        emit(dict(base, workload="epochs", **shape, success=succeeded / args.peers,
                  error=(errors.get(0) or "peer 0 gave no result").splitlines()[0][:200]))
        return

    per_epoch = [(t2 - t1) / (e2 - e1) for (e1, t1), (e2, t2) in zip(lead["epochs"], lead["epochs"][1:]) if e2 > e1]
    steps = [s for r in done.values() for s in r["step_s"]]
    epochs = lead["final_epoch"]
    emit(dict(base, workload="epochs", **shape, epochs=epochs,
              epoch_median_s=statistics.median(per_epoch) if per_epoch else float("nan"),
              epoch_max_s=max(per_epoch) if per_epoch else float("nan"),
              step_median_s=percentile(steps, 50), step_max_s=max(steps) if steps else float("nan"),
              startup_max_s=max(r["join_s"] for r in done.values()), success=succeeded / args.peers))

    traffic_record = dict(base, workload="traffic")
    if args.impl == "apiary":
        counted = [r["bytes"] for r in done.values() if "bytes" in r]
        if len(counted) < args.peers:
            traffic_record["bytes_note"] = f"{len(counted)} of {args.peers} peers"
        bytes_total = sum(counted)
    elif traffic.error is not None:
        bytes_total = None
        traffic_record["bytes_per_epoch"] = f"n/a: {traffic.error}"[:60]
    if bytes_total is not None:
        traffic_record["bytes_total"] = bytes_total
        traffic_record["bytes_per_epoch"] = bytes_total / epochs if epochs else float("nan")
    emit(traffic_record)

    emit(dict(base, workload="accuracy", target=args.accuracy, time_to_target_s=lead["reached_s"],
              epoch_at_target=lead["reached_epoch"], final_accuracy=lead["final_accuracy"]))


if __name__ == "__main__":
    main()
