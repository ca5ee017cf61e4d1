"""apiary.autodist with real trainer processes (autodist_peers.py, one per replica, over
UCX on loopback): every builder trains the same small torch model to the parameters
single-process training computes on the concatenated batch; a killed replica and bad
arguments give clear errors."""
import glob
import json
import os
import random
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import apiary
import apiary.strategy as strategies
from autodist_peers import batch, make_data, make_model, make_optimizer, make_schedule

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.path.join(HERE, "autodist_peers.py")
SPEC = os.path.join(HERE, "..", "..", "examples", "ps", "resource_spec.yml")  # localhost, 4 CPUs: 4 replicas
REPLICAS, BATCH = 4, 16
BUILDERS = ["PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce", "PartitionedAR",
            "RandomAxisPartitionAR", "Parallax"]


def free_port_range(width: int = 400) -> int:
    """The first of `width` ports, none listening now (a random start, checked)."""
    for _ in range(50):
        base = random.randrange(20000, 32768 - width)  # below the ephemeral ports (32768-60999)
        try:
            for port in (base, base + width // 2, base + width - 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port range")


def run_peers(out, builders, optimizer="sgd", sparse=True, steps=6, extra=(), deadline=300.0, replicas=REPLICAS,
              port=None):
    port = port or free_port_range()
    procs = []
    for rank in range(replicas):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(replicas))
        cmd = [sys.executable, PEERS, "--spec", SPEC, "--port", str(port), "--builders", ",".join(builders),
               "--optimizer", optimizer, "--sparse", str(int(sparse)), "--steps", str(steps), "--batch", str(BATCH),
               "--out", str(out)]
        procs.append(subprocess.Popen(cmd + list(extra(rank) if callable(extra) else extra), env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    codes, logs = [], []
    end = time.monotonic() + deadline
    for p in procs:
        try:
            log, _ = p.communicate(timeout=max(1.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("a trainer process hung")
        codes.append(p.returncode)
        logs.append(log.decode(errors="replace"))
    return codes, logs


class AdamEpsilonHat(torch.optim.Optimizer):
    """Adam as apiary's optimizers run it (TensorFlow's form, as AutoDist's): epsilon
    added to sqrt(v) and the bias corrections folded into the step size."""

    def __init__(self, params, lr=0.01, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["t"] += 1
                t = state["t"]
                state["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                lr_t = group["lr"] * (1 - b2 ** t) ** 0.5 / (1 - b1 ** t)
                p.sub_(lr_t * state["m"] / (state["v"].sqrt() + group["eps"]))


def reference(optimizer: str, steps: int, schedule: bool = False):
    """Single-process training of replica 0's model on each step's concatenated batch
    (dense embedding gradients: the same update for SGD)."""
    model = make_model(seed=100, sparse=False)
    if optimizer == "adam":
        opt = AdamEpsilonHat(model.parameters(), lr=0.01, eps=1e-8)  # autodist_peers' Adam
    else:
        opt = make_optimizer(optimizer, model.parameters())
    scheduler = make_schedule(opt) if schedule else None
    data = make_data()
    for step in range(steps):
        x, ids, y = batch(data, step, 1, 0, REPLICAS * BATCH)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x, ids), y).backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()
    return {n: p.detach().numpy() for n, p in model.named_parameters()}


def reference_without(optimizer: str, steps: int, lost: int, from_step: int, back_at: int = -1):
    """reference() where replica `lost` is gone from step `from_step` on (until step
    `back_at`, when given): those steps train on the other replicas' batches only (the
    mean over them)."""
    model = make_model(seed=100, sparse=False)
    opt = make_optimizer(optimizer, model.parameters())
    data = make_data()
    for step in range(steps):
        gone = from_step <= step and (back_at < 0 or step < back_at)
        ranks = [r for r in range(REPLICAS) if not gone or r != lost]
        rows = [batch(data, step, REPLICAS, r, BATCH) for r in ranks]
        x, ids, y = (torch.cat([part[i] for part in rows]) for i in range(3))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x, ids), y).backward()
        opt.step()
    return {n: p.detach().numpy() for n, p in model.named_parameters()}


def check_equal(out, builders, ref, atol, ranks=range(REPLICAS)):
    for name in builders:
        for rank in ranks:
            got = np.load(os.path.join(out, f"{name}.{rank}.npz"))
            for var, want in ref.items():
                np.testing.assert_allclose(got[var], want, rtol=0, atol=atol,
                                           err_msg=f"{name}: replica {rank}'s {var}")


def test_every_builder_equals_single_process_sgd(tmp_path):
    codes, logs = run_peers(tmp_path, BUILDERS, "sgd", sparse=True)
    assert codes == [0] * REPLICAS, "\n".join(logs)
    # SGD on the mean of the replicas' mean gradients is SGD on the concatenated batch;
    # sums in another order differ in the last bits only.
    check_equal(tmp_path, BUILDERS, reference("sgd", 6), atol=1e-5)
    summaries = {name: json.load(open(os.path.join(tmp_path, f"{name}.0.json")))["summary"] for name in BUILDERS}
    # backward() wrote every dense gradient into the job's own memory, pushed without a copy.
    for name in BUILDERS:
        for rank in range(REPLICAS):
            assert json.load(open(os.path.join(tmp_path, f"{name}.{rank}.json")))["bound"] == [True] * 6, name
    assert "PS embedding.weight (sparse)" in summaries["PS"]
    assert "all-reduce plan" in summaries["AllReduce"] and "PS " not in summaries["AllReduce"]
    # Parallax: the sparse embedding on a PS, the dense layers all-reduced.
    assert "PS embedding.weight (sparse)" in summaries["Parallax"] and "all-reduce plan" in summaries["Parallax"]
    assert "hidden.weight" not in summaries["Parallax"].split("all-reduce plan")[0]
    # PartitionedPS splits the embedding (40 rows) in 2 shards.
    assert "embedding.weight (sparse) on" in summaries["PartitionedPS"] and "(2 shards)" in summaries["PartitionedPS"]
    # Rank 0 serves the PS devices (the lowest rank on their host), the others none.
    served = [json.load(open(os.path.join(tmp_path, f"PSLoadBalancing.{r}.json")))["served"] for r in range(REPLICAS)]
    assert served[0] and not any(served[1:])


@pytest.mark.skipif(not os.environ.get("APIARY_BIN"), reason="APIARY_BIN (the apiary executable) is not set")
def test_apiary_launch_starts_every_trainer(tmp_path):
    """`apiary launch --resource-spec` (no strategy: the trainers build theirs) starts one
    trainer per replica with RANK, WORLD_SIZE and APIARY_PORT, prefixes their output, and
    the job equals single-process SGD."""
    builders = ["PSLoadBalancing", "AllReduce"]
    cmd = [os.environ["APIARY_BIN"], "launch", "--resource-spec", SPEC, "--port", str(free_port_range()), "--",
           sys.executable, PEERS, "--spec", SPEC, "--builders", ",".join(builders), "--optimizer", "sgd",
           "--sparse", "1", "--steps", "6", "--batch", str(BATCH), "--out", str(tmp_path)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    log = done.stdout.decode(errors="replace")
    assert done.returncode == 0, log
    assert f"launch: {REPLICAS} processes ended, every one with 0" in log, log
    check_equal(tmp_path, builders, reference("sgd", 6), atol=1e-5)


def test_an_insecure_job_equals_single_process_sgd(tmp_path):
    # Every process of the job plaintext (insecure=True): the same SGD as an encrypted job.
    codes, logs = run_peers(tmp_path, ["Parallax"], "sgd", sparse=True, extra=["--insecure"])
    assert codes == [0] * REPLICAS, "\n".join(logs)
    check_equal(tmp_path, ["Parallax"], reference("sgd", 6), atol=1e-5)
    # Replica 0 plaintext, the others encrypted: the job fails, saying why.
    codes, logs = run_peers(tmp_path, ["Parallax"], "sgd", sparse=True,
                            extra=lambda rank: ["--insecure"] if rank == 0 else [])
    assert any(code != 0 for code in codes)
    assert "start both with --insecure, or neither" in "\n".join(logs)


def test_gradients_set_to_none_or_replaced_are_copied(tmp_path):
    # Odd steps start from gradients set to None, steps 2 and 6 replace them after backward:
    # those steps push copies, the others the job's own memory; the result is the same.
    builders = ["PSLoadBalancing", "AllReduce", "Parallax"]
    codes, logs = run_peers(tmp_path, builders, "sgd", sparse=True, steps=8, extra=["--grads", "mixed"])
    assert codes == [0] * REPLICAS, "\n".join(logs)
    check_equal(tmp_path, builders, reference("sgd", 8), atol=1e-5)
    bound = json.load(open(os.path.join(tmp_path, "AllReduce.0.json")))["bound"]
    assert bound == [True, False, False, False, True, False, False, False]


@pytest.mark.parametrize("optimizer,atol", [("momentum", 1e-5), ("adam", 1e-5)])
def test_momentum_and_adam_equal_single_process(tmp_path, optimizer, atol):
    builders = ["PSLoadBalancing", "PartitionedPS", "AllReduce", "Parallax"]
    codes, logs = run_peers(tmp_path, builders, optimizer, sparse=False)
    assert codes == [0] * REPLICAS, "\n".join(logs)
    # Adam: against its epsilon-hat form, which apiary runs (apiary.autodist's docs).
    check_equal(tmp_path, builders, reference(optimizer, 6), atol=atol)


def stop(processes):
    """Kills each process and reaps it."""
    for p in processes:
        p.kill()
        p.wait()


def start_ps_processes(tmp_path, port, processes=2, extra=()):
    """PS processes for the PSLoadBalancing job of the peers (each started with its own
    random model: the job takes replica 0's values), the strategy's PS devices dealt out
    among them; the processes, the devices each serves, and the devices in plan order."""
    model = make_model(seed=1, sparse=True)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    devices = apiary.autodist.AutoDist(SPEC, strategies.PSLoadBalancing(), job="test.PSLoadBalancing").ps_devices(
        model, sgd)
    assert len(devices) >= processes
    dealt = [devices[i::processes] for i in range(processes)]
    servers = [subprocess.Popen([sys.executable, PEERS, "--spec", SPEC, "--port", str(port), "--builders",
                                 "PSLoadBalancing", "--out", str(tmp_path), "--serve", ",".join(d)] + list(extra),
                                env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
               for d in dealt]
    return servers, dealt, devices


@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_a_learning_rate_schedule_drives_every_update(tmp_path, optimizer):
    """StepLR (halved every 2 steps) on the torch optimizer: the PS shards (PSLoadBalancing,
    Parallax's embedding) and the replicas' own optimizers (AllReduce, Parallax's dense
    layers) update at each step's rate, equal to single-process training with the same
    schedule; without the schedule the result differs (the test can tell). Momentum runs
    with a dense embedding, as the momentum test does (sparse rows keep lazy slots)."""
    builders = ["PSLoadBalancing", "AllReduce", "Parallax"]
    codes, logs = run_peers(tmp_path, builders, optimizer, sparse=optimizer == "sgd", extra=["--schedule"])
    assert codes == [0] * REPLICAS, "\n".join(logs)
    scheduled = reference(optimizer, 6, schedule=True)
    check_equal(tmp_path, builders, scheduled, atol=1e-5)
    constant = reference(optimizer, 6)
    assert any(np.abs(scheduled[v] - constant[v]).max() > 1e-3 for v in scheduled)


def test_ps_devices_in_processes_of_their_own(tmp_path):
    """PSLoadBalancing with its PS devices served by 2 PS processes (2 devices each) and
    4 trainer processes equals single-process SGD too."""
    port = free_port_range()
    servers, _, _ = start_ps_processes(tmp_path, port)
    try:
        codes, logs = run_peers(tmp_path, ["PSLoadBalancing"], "sgd", sparse=True, port=port,
                                extra=["--ps-processes"])
        assert codes == [0] * REPLICAS, "\n".join(logs)
        assert all(s.poll() is None for s in servers)  # they serve until stopped
        served = json.load(open(os.path.join(tmp_path, "PSLoadBalancing.0.json")))["served"]
        assert served == []  # no trainer served a PS device
        check_equal(tmp_path, ["PSLoadBalancing"], reference("sgd", 6), atol=1e-5)
    finally:
        stop(servers)


def test_a_killed_ps_process_is_named_within_the_deadline(tmp_path):
    """One of the 2 PS processes is killed while the 4 trainers train (0.3 s a step):
    every trainer fails with an error naming a PS device that process served (or its
    address), within the 5 s timeout of the calls it was in (well under a minute)."""
    port = free_port_range()
    servers, dealt, devices = start_ps_processes(tmp_path, port)
    killed = dealt[1]
    # The k-th PS device of the plan listens at port + replicas + k.
    addresses = [f"127.0.0.1:{port + REPLICAS + devices.index(d)}" for d in killed]
    try:
        peers = [subprocess.Popen([sys.executable, PEERS, "--spec", SPEC, "--port", str(port), "--builders",
                                   "PSLoadBalancing", "--optimizer", "sgd", "--steps", "200", "--step-sleep", "0.3",
                                   "--sparse", "1", "--out", str(tmp_path), "--timeout", "5", "--ps-processes"],
                                  env=dict(os.environ, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for r in range(REPLICAS)]
        # Once every trainer took its first step, the second PS process dies.
        started = [os.path.join(tmp_path, f"PSLoadBalancing.{r}.started") for r in range(REPLICAS)]
        deadline = time.monotonic() + 120
        while not all(map(os.path.exists, started)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in peers), "the trainers did not start"
            time.sleep(0.2)
        servers[1].kill()
        servers[1].wait()
        logs = [p.communicate(timeout=180)[0].decode(errors="replace") for p in peers]
        for rank in range(REPLICAS):
            assert peers[rank].returncode == 1, logs[rank]
            error = open(os.path.join(tmp_path, f"PSLoadBalancing.{rank}.error")).read()
            assert any(d in error for d in killed) or any(a in error for a in addresses), error
            seconds = float(error.split("after ")[1].split(" s")[0])
            assert seconds < 60, error
    finally:
        stop(servers)


def test_a_checkpoint_moves_the_job_between_strategies(tmp_path):
    """Momentum for 3 steps with PSLoadBalancing (PS shards hold the slots), a checkpoint,
    then 3 more steps with AllReduce (the replicas hold them): the same as 6 steps in one
    process, so every variable's momentum crossed over."""
    state = os.path.join(tmp_path, "state.pt")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    codes, logs = run_peers(first, ["PSLoadBalancing"], "momentum", sparse=False, steps=3, extra=["--save", state])
    assert codes == [0] * REPLICAS, "\n".join(logs)
    saved = torch.load(state)
    assert saved["optimizer"]["hidden.weight"][0] == 3  # three updates, read from the shard
    codes, logs = run_peers(second, ["AllReduce"], "momentum", sparse=False, steps=3,
                            extra=["--load", state, "--first-step", "3"])
    assert codes == [0] * REPLICAS, "\n".join(logs)
    check_equal(second, ["AllReduce"], reference("momentum", 6), atol=1e-5)


def test_ssp_stays_within_its_bound_and_async_converges(tmp_path):
    """Replica 3 sleeps 0.15 s a step. Under SSP with staleness 2 the others run ahead, but
    the parameters they pull for step s carry at least s - 2 updates; asynchronous
    updates (no bound) still bring the loss down."""
    ssp, asynchronous = tmp_path / "ssp", tmp_path / "async"
    ssp.mkdir()
    asynchronous.mkdir()
    slow = lambda rank: ["--step-sleep", "0.15"] if rank == 3 else []  # noqa: E731
    codes, logs = run_peers(ssp, ["PSLoadBalancing"], "sgd", steps=12,
                            extra=lambda rank: ["--staleness", "2"] + slow(rank))
    assert codes == [0] * REPLICAS, "\n".join(logs)
    ahead = 0
    for rank in range(REPLICAS):
        versions = json.load(open(os.path.join(ssp, f"PSLoadBalancing.{rank}.json")))["versions"]
        # After step s (0-based) the pull is for step s + 1.
        for s, v in enumerate(versions):
            assert s + 1 - v <= 2, (rank, versions)
            ahead = max(ahead, s + 1 - v)
    assert ahead > 0  # the fast replicas did use the slack
    codes, logs = run_peers(asynchronous, ["PSLoadBalancing"], "sgd", steps=30,
                            extra=lambda rank: ["--async"] + slow(rank))
    assert codes == [0] * REPLICAS, "\n".join(logs)
    for rank in range(REPLICAS):
        losses = json.load(open(os.path.join(asynchronous, f"PSLoadBalancing.{rank}.json")))["losses"]
        assert np.mean(losses[-5:]) < np.mean(losses[:5]), (rank, losses)


@pytest.mark.parametrize("builder", ["PSLoadBalancing", "AllReduce"])
def test_a_killed_replica_is_named_within_the_deadline(tmp_path, builder):
    codes, logs = run_peers(tmp_path, [builder], "sgd", steps=6, deadline=120.0,
                            extra=lambda rank: ["--timeout", "5"] + (["--die-at-step", "3"] if rank == 2 else []))
    assert codes[2] == 3
    for rank in (0, 1, 3):
        assert codes[rank] == 1, logs[rank]
        error = open(os.path.join(tmp_path, f"{builder}.{rank}.error")).read()
        assert "replica 2" in error or "127.0.0.1" in error, error
        seconds = float(error.split("after ")[1].split(" s")[0])
        assert seconds < 60, error


def test_bad_arguments(tmp_path):
    model = make_model(seed=1, sparse=True)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(FileNotFoundError):
        apiary.autodist.AutoDist(os.path.join(tmp_path, "missing.yml"))
    with pytest.raises(TypeError):
        apiary.autodist.AutoDist(SPEC, "PS")
    with pytest.raises(ValueError, match="expected transport 'tcp' or 'shm', got 'rdma'"):
        apiary.autodist.AutoDist(SPEC, strategies.PS(), transport="rdma")
    port = free_port_range()
    with pytest.raises(ValueError, match="rank 7 is not a replica of the strategy, which has 4"):
        apiary.autodist.AutoDist(SPEC, strategies.PS(), rank=7, port=port).distribute(model, sgd)
    with pytest.raises(NotImplementedError, match="RMSprop"):
        apiary.autodist.AutoDist(SPEC, rank=0, port=port).distribute(model, torch.optim.RMSprop(model.parameters()))
    with pytest.raises(NotImplementedError, match="weight_decay"):
        apiary.autodist.AutoDist(SPEC, rank=0, port=port).distribute(
            model, torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.1))
    with pytest.raises(ValueError, match="staleness"):
        apiary.autodist.AutoDist(SPEC, strategies.PS(staleness=-1), rank=0, port=port).distribute(model, sgd)
    with pytest.raises(ValueError, match="compressor"):
        apiary.autodist.AutoDist(SPEC, strategies.AllReduce(compressor="zip"), rank=0, port=port).distribute(model, sgd)
    with pytest.raises(ValueError, match="localhost:CPU:3 is not a PS device of the strategy; its PS devices: "
                                         "localhost:CPU:0"):
        apiary.autodist.AutoDist(SPEC, strategies.PS(), port=port).serve(model, sgd, "localhost:CPU:3")
    with pytest.raises(ValueError, match="drop_lost_replicas_after"):
        apiary.autodist.AutoDist(SPEC, strategies.PS(), drop_lost_replicas_after=-1.0)
    with pytest.raises(ValueError, match="replay_steps"):
        apiary.autodist.AutoDist(SPEC, strategies.PS(), ps_restart_wait=5.0, replay_steps=-2)
    with pytest.raises(ValueError, match="ps_restart_wait needs ps_processes"):
        apiary.autodist.AutoDist(SPEC, strategies.PS(), rank=0, port=port, ps_restart_wait=5.0).distribute(model, sgd)
    with pytest.raises(ValueError, match="expected resume to be a state of AutoDist.state_dict"):
        apiary.autodist.AutoDist(SPEC, strategies.PS(), port=port).serve(model, sgd, "localhost:CPU:0", resume={})
    with pytest.raises(NotImplementedError, match="does not take a member back"):
        apiary.autodist.AutoDist(SPEC, strategies.AllReduce(), rank=2, port=port, rejoin=True).distribute(model, sgd)
    with pytest.raises(NotImplementedError, match="replica 0 cannot rejoin: it serves PS device localhost:CPU:0"):
        apiary.autodist.AutoDist(SPEC, strategies.PS(), rank=0, port=port, rejoin=True).distribute(model, sgd)
    # Replica 0 never answers: replica 1 gives up after its patience, naming where it looked.
    ad = apiary.autodist.AutoDist(SPEC, strategies.AllReduce(), rank=1, port=port, timeout=1.0, patience=3.0)
    started = time.monotonic()
    with pytest.raises((ConnectionError, TimeoutError), match="initial values from replica 0"):
        ad.distribute(model, sgd)
    assert time.monotonic() - started < 30


def test_a_lost_replica_is_dropped_and_the_others_train_on(tmp_path):
    """Replica 2's process exits at the start of step 3 (PSLoadBalancing, bulk-synchronous,
    its PS devices in replica 0's process). With drop_lost_replicas_after=1 s the shards
    drop it and the other three finish the 6 steps, equal to single-process SGD on all
    four batches for steps 0-2 and on the three left for steps 3-5; without it, they fail
    (test_a_killed_replica_is_named_within_the_deadline)."""
    codes, logs = run_peers(tmp_path, ["PSLoadBalancing"], "sgd", steps=6, deadline=180.0,
                            extra=lambda rank: ["--timeout", "10", "--drop-lost-after", "1"] +
                            (["--die-at-step", "3"] if rank == 2 else []))
    assert codes == [0, 0, 3, 0], "\n".join(logs)
    survivors = (0, 1, 3)
    want = reference_without("sgd", 6, lost=2, from_step=3)
    check_equal(tmp_path, ["PSLoadBalancing"], want, atol=1e-5, ranks=survivors)
    unbroken = reference("sgd", 6)
    assert any(np.abs(want[v] - unbroken[v]).max() > 1e-3 for v in want)  # the test can tell


def test_a_ps_process_started_again_from_a_checkpoint_continues_the_job(tmp_path):
    """Momentum, PSLoadBalancing with 2 PS processes: replica 0 writes the job's
    state_dict() at the start of step 6, then the second PS process is killed; started
    again with serve(..., resume=that checkpoint), its shards continue from step 6 with
    their momentum slots, the replicas (ps_restart_wait) replay their pushes since (they
    keep 4 steps', too few to rebuild the shards from the start), and the 12 steps equal
    single-process training."""
    port = free_port_range()
    ps_args = ["--optimizer", "momentum", "--sparse", "0"]
    servers, _, _ = start_ps_processes(tmp_path, port, extra=ps_args)
    checkpoint = os.path.join(tmp_path, "step6.pt")
    try:
        peers = [subprocess.Popen([sys.executable, PEERS, "--spec", SPEC, "--port", str(port), "--builders",
                                   "PSLoadBalancing", "--steps", "12", "--step-sleep", "0.2", "--out", str(tmp_path),
                                   "--timeout", "10", "--ps-processes", "--ps-restart-wait", "60",
                                   "--replay-steps", "4", "--checkpoint-at", "6", "--checkpoint", checkpoint]
                                  + ps_args, env=dict(os.environ, RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
                 for r in range(REPLICAS)]
        deadline = time.monotonic() + 120
        while not os.path.exists(checkpoint):
            assert time.monotonic() < deadline and all(p.poll() is None for p in peers), "no checkpoint"
            time.sleep(0.1)
        servers[1].kill()
        dead_log = servers[1].communicate()[0].decode(errors="replace")
        time.sleep(1.0)  # the replicas meet the lost PS process and wait for it
        assert all(p.poll() is None for p in peers), dead_log
        restarted = subprocess.Popen(servers[1].args + ["--resume", checkpoint], env=dict(os.environ),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        servers[1] = restarted
        logs = [p.communicate(timeout=240)[0].decode(errors="replace") for p in peers]
        assert [p.returncode for p in peers] == [0] * REPLICAS, "\n".join(logs)
        saved = torch.load(checkpoint)
        assert saved["step"] == 6 and saved["optimizer"]["hidden.weight"][0] == 6
        check_equal(tmp_path, ["PSLoadBalancing"], reference("momentum", 12), atol=1e-5)
    finally:
        stop(servers)


def test_a_replica_started_again_after_it_was_dropped_rejoins_the_job(tmp_path):
    """Replica 2's process exits at the start of step 3 and is dropped 1 s later; a new
    process for replica 2 (rejoin=True) takes the running job's parameters from the PS
    devices and trains from the step the shards take it back at to the end (40 steps).
    Every replica ends with the same parameters, equal to single-process SGD on four
    batches before step 3, three until the rejoin and four again after."""
    port = free_port_range()
    common = ["--spec", SPEC, "--port", str(port), "--builders", "PSLoadBalancing", "--steps", "40",
              "--step-sleep", "0.2", "--out", str(tmp_path), "--timeout", "10", "--drop-lost-after", "1"]
    peers = {r: subprocess.Popen([sys.executable, PEERS] + common + (["--die-at-step", "3"] if r == 2 else []),
                                 env=dict(os.environ, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(REPLICAS)}
    try:
        assert peers[2].wait(timeout=120) == 3
        back = subprocess.Popen([sys.executable, PEERS] + common + ["--rejoin"], env=dict(os.environ, RANK="2"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        logs = {r: peers[r].communicate(timeout=240)[0].decode(errors="replace") for r in (0, 1, 3)}
        logs[2] = back.communicate(timeout=240)[0].decode(errors="replace")
        assert [peers[r].returncode for r in (0, 1, 3)] + [back.returncode] == [0] * REPLICAS, "\n".join(logs.values())
    finally:
        for p in peers.values():
            p.kill()
    info = json.load(open(os.path.join(tmp_path, "PSLoadBalancing.2.json")))
    back_at = info["first"]
    assert 3 < back_at < 40, info  # it missed some steps and trained the rest
    assert info["versions"][-1] == 40
    want = reference_without("sgd", 40, lost=2, from_step=3, back_at=back_at)
    check_equal(tmp_path, ["PSLoadBalancing"], want, atol=1e-5)
