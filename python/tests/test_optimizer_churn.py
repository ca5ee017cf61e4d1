"""apiary.Optimizer through churn, real processes: 8 peers train the digits; every 10 s
for 2 minutes one is killed (SIGKILL) and a fresh one starts, loads the swarm's state and
catches up. No peer hangs, epochs only increase, every joiner holds exactly the
parameters some donor shared, and the swarm reaches the target accuracy."""
import json
import multiprocessing as mp
import os
import random
import time

import pytest

import apiary
from optim_peers import churn_peer

PEERS, PERIOD, CHURN_SECONDS, TARGET_ACCURACY = 8, 10.0, 120.0, 0.9


def test_peers_join_and_die_while_the_swarm_trains(tmp_path):
    log_path, stop_path = str(tmp_path / "churn.jsonl"), str(tmp_path / "stop")
    ctx = mp.get_context("spawn")
    rng = random.Random(7)
    with apiary.DHT() as root:
        initial = root.get_visible_maddrs()
        procs = {}

        def start(rank):
            procs[rank] = ctx.Process(target=churn_peer, args=(initial, "churn", rank, log_path, stop_path,
                                                              0.02 + 0.01 * (rank % 4)), daemon=True)
            procs[rank].start()

        for rank in range(PEERS):
            start(rank)
        killed, next_rank, began = [], PEERS, time.monotonic()
        try:
            while time.monotonic() - began < CHURN_SECONDS:
                time.sleep(PERIOD)
                victim = rng.choice(sorted(r for r, p in procs.items() if p.is_alive()))
                procs[victim].kill()
                procs[victim].join(10)
                killed.append(victim)
                start(next_rank)
                next_rank += 1
            time.sleep(15)  # the last joiner catches up
            open(stop_path, "w").close()
            survivors = [r for r in procs if r not in killed]
            for rank in survivors:
                procs[rank].join(90)
            hung = [rank for rank in survivors if procs[rank].is_alive()]
            assert not hung, f"peers {hung} did not stop within 90 s"
            codes = {rank: procs[rank].exitcode for rank in survivors}
        finally:
            for p in procs.values():
                if p.is_alive():
                    p.kill()

    records = [json.loads(line) for line in open(log_path) if line.strip().endswith("}")]
    assert len(killed) == int(CHURN_SECONDS // PERIOD)
    epochs = {}
    for r in records:
        if r["event"] == "epoch":
            epochs.setdefault(r["rank"], []).append(r["epoch"])
    for rank, seen in epochs.items():
        assert seen == sorted(seen), f"peer {rank}'s epoch went back: {seen}"
    shared = {r["digest"] for r in records if r["event"] == "shared"}
    loaded = [r for r in records if r["event"] == "loaded"]
    joiners = set(range(PEERS, next_rank))
    assert joiners <= {r["rank"] for r in loaded}, "a joiner did not load the swarm's state"
    for r in loaded:
        assert r["digest"] in shared, f"peer {r['rank']} loaded parameters no donor shared: {r}"
    finals = [r for r in records if r["event"] == "final"]
    assert {r["rank"] for r in finals} == set(survivors)
    assert max(r["epoch"] for r in finals) >= 10
    assert sum(r["accuracy"] for r in finals) / len(finals) >= TARGET_ACCURACY, finals
    # Every survivor trained to the end (its "final" record). One that then aborted in
    # UCX 1.13's tcp sockcm while its transport shut down (an assertion in
    # uct_tcp_sockcm_ep_progress_send, seen when peers connect and stop at once) is
    # reported as an expected failure, never as a pass; any other exit fails.
    aborted = [rank for rank, code in codes.items() if code == -6]
    assert all(code == 0 for rank, code in codes.items() if rank not in aborted), codes
    if aborted:
        pytest.xfail(f"peers {aborted} aborted in UCX 1.13's tcp sockcm at shutdown, after training: {codes}")
