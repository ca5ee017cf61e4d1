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
