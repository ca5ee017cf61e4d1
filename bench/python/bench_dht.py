"""hivemind's benchmark_dht.py workload through one implementation's DHT API: N peers,
each bootstrapping from up to 4 earlier ones; worker threads run rounds in which 8
random live peers each store one subkey of a fresh key and 8 random live peers get it
(latest=True); a get succeeds iff it returns exactly the stored subkeys with their
values; a fraction of the peers is shut down at random rounds."""
import random
import statistics
import sys
import threading
import time
import uuid
import warnings

from common import emit, implementation, load, percentile


def main():
    parser = implementation()
    parser.add_argument("--peers", type=int, default=16)
    parser.add_argument("--initial-peers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=16, help="rounds per worker thread")
    parser.add_argument("--store-peers", type=int, default=8)
    parser.add_argument("--get-peers", type=int, default=8)
    parser.add_argument("--failure-rate", type=float, default=0.1)
    parser.add_argument("--expiration", type=float, default=300)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--verbose", action="store_true", help="print each failed get")
    parser.add_argument("--wait", type=float, default=30.0,
                        help="seconds to wait for one operation's result (then it counts as failed)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    hm = load(args.impl)
    random.seed(args.seed)

    started = time.perf_counter()
    peers = []
    for _ in range(args.peers):
        neighbors = sum([p.get_visible_maddrs() for p in random.sample(peers, min(args.initial_peers, len(peers)))], [])
        kwargs = {"wait_timeout": 5} if args.impl == "hivemind" else {}
        peers.append(hm.DHT(initial_peers=neighbors, start=True, **kwargs))
    startup_s = time.perf_counter() - started

    lock = threading.Lock()
    alive = list(range(args.peers))
    total_rounds = args.threads * args.rounds
    kills = int(round(args.failure_rate * args.peers))
    kill_at = set(random.sample(range(total_rounds), kills))
    counter = [0]
    store_times, get_times = [], []
    stores_ok = stores_all = gets_ok = gets_all = 0

    def attempt(start):
        try:
            return start()
        except Exception as e:  # noqa: BLE001 - a peer shut down since the round sampled it
            if args.verbose:
                print(f"call: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            return None

    def worker(seed):
        nonlocal stores_ok, stores_all, gets_ok, gets_all
        rng = random.Random(seed)
        for _ in range(args.rounds):
            with lock:
                index = counter[0]
                counter[0] += 1
                if index in kill_at and len(alive) > max(args.store_peers, args.get_peers):
                    victim = alive.pop(rng.randrange(len(alive)))
                    peers[victim].shutdown()
                live = list(alive)
            key = uuid.uuid4().hex
            storers = rng.sample(live, min(args.store_peers, len(live)))
            getters = rng.sample(live, min(args.get_peers, len(live)))
            t0 = time.perf_counter()
            expiration = hm.utils.get_dht_time() + args.expiration
            futures = [attempt(lambda i=i: peers[i].store(key, f"value-{i}", expiration, subkey=i, return_future=True))
                       for i in storers]
            stored = {}
            for i, f in zip(storers, futures):
                try:
                    if f is not None and f.result(timeout=args.wait):
                        stored[i] = f"value-{i}"
                except Exception as e:  # noqa: BLE001 - a failed store counts as failed
                    if args.verbose:
                        print(f"store by peer {i}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            t1 = time.perf_counter()
            all_getters = list(getters)
            futures = [attempt(lambda i=i: peers[i].get(key, latest=True, return_future=True)) for i in getters]
            results = []
            for f in futures:
                try:
                    results.append(None if f is None else f.result(timeout=args.wait))
                except Exception as e:  # noqa: BLE001 - a failed get counts as failed
                    if args.verbose:
                        print(f"get: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                    results.append(None)
            t2 = time.perf_counter()
            with lock:
                gone = set(range(args.peers)) - set(alive)
            # Ops of peers shut down meanwhile are the harness's, not the DHT's: not counted.
            # A store cut short may still have landed, so its subkey may be there or not.
            getters = [g for g in getters if g not in gone]
            results = [r for g, r in zip(all_getters, results) if g not in gone]
            counted = [i for i in storers if i not in gone or i in stored]
            ok = 0
            for getter, found in zip(getters, results):
                entries = {} if found is None else (
                    {k: v.value for k, v in found.value.items()} if isinstance(found.value, dict) else {})
                extra = set(entries) - set(stored)
                ok += all(entries.get(k) == v for k, v in stored.items()) and extra <= gone
                if args.verbose and entries != stored:
                    print(f"round {key[:8]}: peer {getter} got {sorted(entries)} of {sorted(stored)}"
                          f" (storers {sorted(storers)}, {len(live)} live)", file=sys.stderr, flush=True)
            with lock:
                store_times.append(t1 - t0)
                get_times.append(t2 - t1)
                stores_ok += len(stored)
                stores_all += len(counted)
                gets_ok += ok
                gets_all += len(getters)

    threads = [threading.Thread(target=worker, args=(args.seed + t,)) for t in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in alive:
        peers[i].shutdown()
    emit({"bench": "dht", "peers": args.peers, "startup_s": startup_s,
          "store_mean_s": statistics.mean(store_times), "store_p99_s": percentile(store_times, 99),
          "get_mean_s": statistics.mean(get_times), "get_p99_s": percentile(get_times, 99),
          "store_success": stores_ok / max(stores_all, 1), "get_success": gets_ok / max(gets_all, 1),
          "killed": args.peers - len(alive)})


if __name__ == "__main__":
    main()
