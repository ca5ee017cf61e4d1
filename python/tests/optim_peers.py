"""Peers for test_progress_tracker.py (module-level functions: they run in spawned processes)."""
import time

import apiary
from apiary.optim import ProgressTracker


def train_and_report(initial_peers, prefix, target, batch_size, period, stop_epoch, deadline_s):
    """A worker: reports `batch_size` more samples every `period` seconds and moves to the
    next epoch when the tracker says, until the global epoch reaches `stop_epoch`."""
    with apiary.DHT(initial_peers=initial_peers) as dht:
        tracker = ProgressTracker(dht, prefix, target, min_refresh_period=0.1, default_refresh_period=0.2,
                                  max_refresh_period=0.5)
        local_epoch, samples, seen = 0, 0, []
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            time.sleep(period)
            samples += batch_size
            tracker.report_local_progress(local_epoch, samples)
            progress = tracker.global_progress
            seen.append((local_epoch, progress.epoch, progress.num_peers))
            if progress.epoch >= stop_epoch:
                break
            if tracker.ready_to_update_epoch:
                local_epoch = tracker.update_epoch(max(local_epoch + 1, progress.epoch))
                samples = 0
        speed = tracker.local_progress.samples_per_second
        tracker.shutdown()
        return seen, speed


def forge_progress(initial_peers, prefix, victim_marker):
    """A peer without a tracker: tries to write the victim's progress and a mistyped one."""
    from apiary.dht.crypto import Ed25519SignatureValidator

    signer = Ed25519SignatureValidator()
    with apiary.DHT(initial_peers=initial_peers, client_mode=True, record_validators=[signer]) as dht:
        record = dict(peer_id=b"x", epoch=99, samples_accumulated=10**6, samples_per_second=1e6,
                      time=apiary.get_dht_time(), client_mode=False)
        expiration = apiary.get_dht_time() + 30
        return (dht.store(f"{prefix}_progress", record, expiration, subkey=victim_marker),
                dht.store(f"{prefix}_progress", dict(record, epoch=-1), expiration, subkey=signer.local_public_key),
                dht.store(f"{prefix}_progress", "not a record", expiration, subkey=signer.local_public_key),
                dht.store(f"{prefix}_progress", record, expiration, subkey=signer.local_public_key))


def accumulate_and_average(initial_peers, prefix, reuse, batches, batch_size, target, pre_schedule):
    """A GradientAverager peer: mse(w, target) gradients of a zero 5x5 parameter, `batches`
    of `batch_size` samples, averaged with its group; returns what it saw."""
    import torch
    import torch.nn.functional as F

    from apiary.optim import GradientAverager

    with apiary.DHT(initial_peers=initial_peers) as dht:
        w = torch.nn.Parameter(torch.zeros(5, 5))
        averager = GradientAverager([w], dht=dht, prefix=prefix, target_group_size=2, reuse_grad_buffers=reuse,
                                    min_matchmaking_time=2.0, request_timeout=1.0, start=True)
        control = averager.schedule_step(apiary.get_dht_time() + 3) if pre_schedule else None
        for _ in range(batches):
            F.mse_loss(w, torch.full((5, 5), float(target))).backward()
            averager.accumulate_grads_(batch_size=batch_size)
            if not reuse:
                w.grad.zero_()
        counts = (averager.local_samples_accumulated, averager.local_times_accumulated)
        accumulated = next(averager._grad_accumulators()).clone()
        averager.step(control=control, timeout=60)
        with averager.use_averaged_gradients():
            averaged = w.grad.clone()
        restored = w.grad.clone()
        averager.shutdown()
        return counts, accumulated.tolist(), averaged.tolist(), restored.tolist(), averager.local_samples_accumulated


def constant_gradient_trainer(initial_peers, run_id, index, batch_size, batch_time, total_epochs, deadline_s,
                              delayed=False, start_at=0.0):
    """An apiary.Optimizer peer whose loss is (w * c).sum() with c = index + 1 everywhere,
    so its gradient is c whatever w is; SGD(lr=0.1) with StepLR(gamma=0.5) per epoch, no
    delays (or, `delayed`, the optimizer step and both averagings in the background).
    Returns, for each epoch it stepped, the samples it gave that epoch and w after, the
    final learning rate, and w once every delayed update is applied."""
    from functools import partial

    import torch

    w = torch.nn.Parameter(torch.zeros(5))
    c = torch.full((5,), float(index + 1))
    with apiary.DHT(initial_peers=initial_peers) as dht:
        opt = apiary.Optimizer(
            dht=dht, run_id=run_id, target_batch_size=24, batch_size_per_step=batch_size, params=[w],
            optimizer=partial(torch.optim.SGD, lr=0.1),
            scheduler=partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5),
            matchmaking_time=1.0, averaging_timeout=30.0, next_chunk_timeout=10.0, delay_state_averaging=delayed,
            delay_grad_averaging=delayed, delay_optimizer_step=delayed, averager_opts=dict(request_timeout=1.0),
            tracker_opts=dict(min_refresh_period=0.1, max_refresh_period=0.5, default_refresh_period=0.2))
        log = []
        time.sleep(max(0.0, start_at - time.time()))  # the peers begin together (process start-up varies)
        deadline = time.monotonic() + deadline_s
        while opt.local_epoch < total_epochs and time.monotonic() < deadline:
            time.sleep(batch_time)
            (w * c).sum().backward()
            before = opt.local_epoch
            samples = opt.grad_averager.local_samples_accumulated + batch_size
            opt.step()
            opt.zero_grad()
            if opt.local_epoch != before:
                log.append((before, opt.local_epoch, samples, w.detach().clone().tolist()))
        opt.state_averager.step(wait_for_delayed_updates=True)
        lr = opt.param_groups[0]["lr"]
        final = w.detach().clone().tolist()
        opt.shutdown()
        return log, lr, final


def regression_trainer(initial_peers, run_id, index, batch_size, batch_time, client_mode, options, total_epochs,
                       deadline_s):
    """hivemind's test_optimizer peer: a small MLP on a fixed linear regression task with
    apiary.Optimizer (options as given); returns its epochs, samples, losses and state."""
    import random
    from functools import partial

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)  # the same data and initial model on every peer
    features = torch.randn(100, 5)
    targets = features @ torch.randn(5, 1)
    model = nn.Sequential(nn.Linear(5, 5), nn.ReLU(), nn.Linear(5, 1))
    torch.manual_seed(index + 1)
    random.seed(index)
    with apiary.DHT(initial_peers=initial_peers, client_mode=client_mode) as dht:
        opt = apiary.Optimizer(
            dht=dht, run_id=run_id, target_batch_size=32, batch_size_per_step=batch_size,
            params=model.parameters(), optimizer=partial(torch.optim.SGD, lr=0.1),
            scheduler=partial(torch.optim.lr_scheduler.StepLR, gamma=0.5, step_size=1),
            tracker_opts=dict(max_refresh_period=1.0), averager_opts=dict(request_timeout=0.5),
            matchmaking_time=1.0, averaging_timeout=5.0, client_mode=client_mode, **options)
        opt.load_state_from_peers()
        initial_loss = F.mse_loss(model(features), targets).item()
        samples, epochs_seen = 0, []
        reuse = options.get("reuse_grad_buffers", False)
        deadline = time.monotonic() + deadline_s
        while opt.local_epoch < total_epochs and time.monotonic() < deadline:
            time.sleep(max(0.0, random.gauss(batch_time, 0.05)))
            batch = torch.randint(0, len(features), (batch_size,))
            F.mse_loss(model(features[batch]), targets[batch]).backward()
            opt.step()
            samples += batch_size
            epochs_seen.append(opt.local_epoch)
            if not reuse:
                opt.zero_grad()
        time.sleep(1.0)
        opt.state_averager.step(wait_for_delayed_updates=True)
        final_loss = F.mse_loss(model(features), targets).item()
        result = dict(epoch=opt.local_epoch, global_epoch=opt.tracker.global_epoch, samples=samples,
                      epochs_seen=epochs_seen, initial_loss=initial_loss, final_loss=final_loss,
                      lr=opt.param_groups[0]["lr"])
        opt.shutdown()
        result["alive"] = (opt.state_averager.is_alive(), opt.grad_averager is not None and opt.grad_averager.is_alive(),
                           opt.tracker.is_alive())
        return result


def digits_data(shard, shards):
    """scikit-learn's digits: the training shard `shard` of `shards` (all with shards=1)
    and the held-out quarter."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    index = torch.arange(shard, len(x_train), shards)
    return x_train[index], y_train[index], x_test, y_test


def digits_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def held_out_accuracy(model, x, y):
    import torch

    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def single_digits_trainer(steps, batch):
    """One peer on all the training data with Adam(3e-3): the reference for a swarm
    that sees as many samples in all."""
    import torch

    x, y, x_test, y_test = digits_data(0, 1)
    model = digits_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(1)
    for _ in range(steps):
        batch_index = torch.randint(0, len(x), (batch,))
        torch.nn.functional.cross_entropy(model(x[batch_index]), y[batch_index]).backward()
        opt.step()
        opt.zero_grad()
    return held_out_accuracy(model, x_test, y_test)


def diloco_digits_trainer(initial_peers, run_id, rank, peers, rounds, inner_steps, batch, codec, streaming, start_at,
                          group_size=None):
    """A DiLoCo peer on its shard of the digits: Adam(3e-3) inner steps, outer Nesterov,
    groups of `group_size` (default: all the peers); returns the held-out accuracy, the
    outer parameters after each round (the round, its parameters), the bytes sent and the
    rounds averaged without a majority."""
    import torch

    x, y, x_test, y_test = digits_data(rank, peers)
    model = digits_model()
    torch.manual_seed(rank + 1)
    compression = {"none": apiary.NoCompression(), "fp16": apiary.Float16Compression(),
                   "uniform8": apiary.Uniform8BitQuantization(), "blockwise8": apiary.BlockwiseQuantization()}[codec]
    with apiary.DHT(initial_peers=initial_peers) as dht:
        opt = apiary.optim.DiLoCo(dht=dht, run_id=run_id, params=model.parameters(),
                                  inner_optimizer=lambda p: torch.optim.Adam(p, lr=3e-3), inner_steps=inner_steps,
                                  compression=compression, streaming=streaming, matchmaking_time=5.0,
                                  averaging_timeout=30.0, target_group_size=group_size or peers,
                                  averager_opts=dict(request_timeout=3.0))
        outer = []
        time.sleep(max(0.0, start_at - time.time()))  # the peers begin together (process start-up varies)
        # Until the last round (a peer that missed one goes on); at most twice the steps.
        cap = 2 * (rounds + 1) * inner_steps
        steps = 0
        while opt.local_epoch < rounds and steps < cap:
            steps += 1
            batch_index = torch.randint(0, len(x), (batch,))
            torch.nn.functional.cross_entropy(model(x[batch_index]), y[batch_index]).backward()
            before = opt.local_epoch
            opt.step()
            opt.zero_grad()
            if opt.local_epoch != before:
                outer.append((opt.local_epoch, torch.cat([t.reshape(-1) for t in opt.outer_params]).tolist()))
        accuracy = held_out_accuracy(model, x_test, y_test)
        sent, _received = opt.averager._native.transport_bytes()
        wait_for_every_peer(dht, f"{run_id}_done", rank, peers, patience=120.0)
        opt.shutdown()
        return accuracy, outer, sent, opt.deferred_rounds


def wait_for_every_peer(dht, key, rank, peers, patience):
    """Says this peer is done and stays (its averager serving its state) until every peer
    said so, or `patience` seconds: a peer still retrying a round that the others finished
    catches up by loading their state, which needs them to be there."""
    deadline = time.time() + patience
    while True:
        dht.store(key, True, apiary.get_dht_time() + patience, subkey=rank)
        found = dht.get(key, latest=True)
        done = found.value if found is not None and isinstance(found.value, dict) else {}
        if len(done) >= peers or time.time() > deadline:
            return
        time.sleep(0.5)


def churn_peer(initial_peers, run_id, rank, log_path, stop_path, step_time):
    """A digits peer with apiary.Optimizer that logs, as JSON lines: what it shares with
    joiners (epoch, hash of the parameters' bits), what it loaded on joining, and each
    epoch it reaches; it stops when `stop_path` exists and logs its held-out accuracy."""
    import hashlib
    import json
    import os
    from functools import partial

    import torch

    def log(**fields):
        with open(log_path, "a") as f:
            f.write(json.dumps(dict(rank=rank, time=time.time(), **fields)) + "\n")

    def digest(tensors):
        h = hashlib.sha256()
        for t in tensors:
            h.update(t.detach().to(torch.float32).contiguous().numpy().tobytes())
        return h.hexdigest()

    x, y, x_test, y_test = digits_data(rank % 8, 8)
    model = digits_model()
    torch.manual_seed(rank + 100)
    with apiary.DHT(initial_peers=initial_peers) as dht:
        opt = apiary.Optimizer(
            dht=dht, run_id=run_id, target_batch_size=512, batch_size_per_step=32, params=model.parameters(),
            optimizer=partial(torch.optim.SGD, lr=0.3, momentum=0.9), matchmaking_time=1.0, averaging_timeout=10.0,
            load_state_timeout=30.0, averager_opts=dict(request_timeout=1.0),
            tracker_opts=dict(min_refresh_period=0.2, max_refresh_period=1.0))
        share = opt.state_averager.get_current_state

        def shared_state():
            metadata, tensors, infos = share()
            log(event="shared", epoch=metadata["epoch"], digest=digest(tensors[:metadata["num_params"]]))
            return metadata, tensors, infos

        opt.state_averager.get_current_state = shared_state
        if opt.load_state_from_peers():
            log(event="loaded", epoch=opt.local_epoch, digest=digest(model.parameters()))
        log(event="epoch", epoch=opt.local_epoch)
        epoch = opt.local_epoch
        while not os.path.exists(stop_path):
            time.sleep(step_time)
            batch = torch.randint(0, len(x), (32,))
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
            opt.zero_grad()
            if opt.local_epoch != epoch:
                epoch = opt.local_epoch
                log(event="epoch", epoch=epoch)
        log(event="final", epoch=opt.local_epoch, accuracy=held_out_accuracy(model, x_test, y_test))
        opt.shutdown()


def powersgd_peer(initial_peers, prefix, index, rank, min_compression_ratio, rounds):
    """A PowerSGDGradientAverager peer of a Linear(32, 24): every round it accumulates one
    batch whose gradients are this peer's fixed random matrices (seeded by `index`) and
    averages them with its group; returns its gradients and what each round gave."""
    import torch

    from apiary.optim import PowerSGDGradientAverager

    torch.manual_seed(index)
    model = torch.nn.Linear(32, 24)
    grad_w, grad_b = torch.randn(24, 32), torch.randn(24)
    with apiary.DHT(initial_peers=initial_peers) as dht:
        averager = PowerSGDGradientAverager(model.parameters(), rank, dht=dht, prefix=prefix, target_group_size=3, min_group_size=3,
                                            min_compression_ratio=min_compression_ratio, min_matchmaking_time=1.0,
                                            request_timeout=0.5, start=True)
        compressed = sorted(set(range(2)) - averager._uncompressed_gradients_indexes)
        results = []
        for _ in range(rounds):
            model.weight.grad, model.bias.grad = grad_w.clone(), grad_b.clone()
            averager.accumulate_grads_(batch_size=1)
            gathered = averager.step(timeout=60)
            with averager.use_averaged_gradients():
                results.append((model.weight.grad.tolist(), model.bias.grad.tolist(), len(gathered)))
        sizes = averager.compressed_sizes
        averager.shutdown()
        return grad_w.tolist(), grad_b.tolist(), results, compressed, sizes
