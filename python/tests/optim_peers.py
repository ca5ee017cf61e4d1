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
