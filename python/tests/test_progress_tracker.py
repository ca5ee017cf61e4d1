"""apiary.optim.ProgressTracker with hivemind's API (its test_progress_tracker's
behaviours, without timed assertions): peers of different speeds in separate processes
move through epochs together, leave with None, and cannot forge each other's progress."""
import threading
import time

import pytest

import apiary
from apiary.optim import ProgressTracker
from optim_peers import forge_progress, train_and_report
from peers import run_in_processes

TARGET = 256


def test_peers_of_different_speeds_move_through_epochs_together():
    with apiary.DHT() as root:
        tracker = ProgressTracker(root, "run", TARGET, min_refresh_period=0.1, default_refresh_period=0.2,
                                  max_refresh_period=0.5)
        assert tracker.global_progress.epoch == 0 and tracker.local_progress.epoch == 0
        peers = root.get_visible_maddrs()
        reports = []
        workers = threading.Thread(target=lambda: reports.extend(run_in_processes(
            train_and_report, [(peers, "run", TARGET, batch, period, 4, 60)
                               for batch, period in [(12, 0.6), (16, 0.5), (24, 0.4)]], timeout=120)))
        workers.start()
        local_epoch, epochs, most_peers = 0, [0], 0
        deadline = time.monotonic() + 60
        while local_epoch < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
            progress = tracker.global_progress
            most_peers = max(most_peers, progress.num_peers)
            if tracker.ready_to_update_epoch:
                with tracker.pause_updates():  # as hivemind's test does
                    local_epoch = tracker.update_epoch(local_epoch + 1)
                epochs.append(local_epoch)
        workers.join()
        assert epochs == [0, 1, 2, 3, 4]  # one epoch at a time, none skipped, none repeated
        assert most_peers == 4  # the root and the three workers, each seen through the DHT
        assert tracker.performance_ema.samples_per_second < 1e-9  # the root reported no samples
        for seen, speed in reports:
            assert speed > 0
            assert max(n for _, _, n in seen) >= 3
            globals_seen = [g for _, g, _ in seen]
            assert globals_seen == sorted(globals_seen)  # the global epoch never goes back
            assert globals_seen[-1] >= 4  # each stopped once the swarm reached epoch 4
        # The workers left: their records are None now, so only the root counts.
        progress = tracker.fetch_global_progress()
        assert progress.num_peers == 1
        assert tracker.fetched_global_progress_this_epoch.is_set()
        tracker.shutdown()
        assert not tracker.is_alive()


def test_progress_records_cannot_be_forged_or_mistyped():
    with apiary.DHT() as root:
        tracker = ProgressTracker(root, "guarded", TARGET)
        tracker.report_local_progress(0, 5)
        forged, negative, garbage, own = run_in_processes(
            forge_progress, [(root.get_visible_maddrs(), "guarded", tracker.local_public_key)])[0]
        assert forged is False  # another peer's subkey: its signature is missing
        assert negative is False and garbage is False  # the schema refuses them
        assert own is True  # a well-formed record of one's own passes
        progress = tracker.fetch_global_progress()
        assert progress.num_peers == 2
        assert progress.epoch == 99  # the other peer's (well-formed) record counts
        assert tracker.local_progress.samples_accumulated == 5
        tracker.shutdown()


def test_bad_arguments_raise_clear_errors():
    with apiary.DHT() as dht:
        with pytest.raises(ValueError, match="target_batch_size"):
            ProgressTracker(dht, "bad", 0)
        with pytest.raises(ValueError, match="prefix"):
            ProgressTracker(dht, "", 10)
        with pytest.raises(ValueError, match="refresh"):
            ProgressTracker(dht, "bad", 10, min_refresh_period=5, max_refresh_period=1)
        tracker = ProgressTracker(dht, "ok", 10)
        with pytest.raises(ValueError):
            tracker.report_local_progress(-1, 0)
        with pytest.raises(TypeError):
            ProgressTracker(dht, "bad", 10, private_key="not a key")
        tracker.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            tracker.report_local_progress(0, 1)
    with pytest.raises(ValueError, match="running"):
        ProgressTracker(dht, "late", 10)
