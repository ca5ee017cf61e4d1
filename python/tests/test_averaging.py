"""apiary.DecentralizedAverager with hivemind's API: peers in separate processes over UCX
on loopback (hivemind's test_averaging.py: all-reduce with client and aux peers, weights,
step control, load_state_from_peers), and bad input."""
import concurrent.futures
import contextlib
import os
import tempfile
import threading
import time

import numpy as np
import pytest
import torch

import apiary
from averaging_peers import (average_as_member, average_once, share_custom_state, share_state, triggered_step,
                             two_averagers)
from peers import run_in_processes


@pytest.mark.parametrize("modes", [("node",) * 4, ("node", "node", "client", "aux"), ("node", "client", "node", "node")])
def test_allreduce_once(modes):
    rng = np.random.default_rng(0)
    values = [[rng.standard_normal(123).astype(np.float32).tolist(), [float(i)] * 3] for i in range(4)]
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        reports = run_in_processes(average_once, [(peers, i, values[i], modes[i], 1.0, 4) for i in range(4)])
    ids = [r[0] for r in reports]
    senders = [i for i, m in enumerate(modes) if m != "aux"]
    for t in range(2):
        expected = np.mean([np.array(values[i][t], dtype=np.float32) for i in senders], axis=0)
        for i in senders:
            np.testing.assert_allclose(reports[i][2][t], expected, atol=1e-6)
    for _, gathered, _ in reports:
        assert sorted(gathered) == sorted(ids)  # every member's PeerID
        assert sorted(g["index"] for g in gathered.values()) == [0, 1, 2, 3]


def test_members_of_one_authority_average_together():
    # Every call of the averagers (matchmaking, parts) is authorized as their DHT node's.
    with tempfile.TemporaryDirectory() as tmp:
        authority = os.path.join(tmp, "authority.key")
        with apiary.DHT(identity_path=authority):  # a missing identity file gets a fresh key
            pass
        with apiary.DHT(authority_path=authority) as root:
            peers = root.get_visible_maddrs()
            a, b = run_in_processes(average_as_member, [(peers, authority, [1.0, 2.0]), (peers, authority, [3.0, 6.0])])
    assert a == [2.0, 4.0] and b == [2.0, 4.0]


def test_two_averagers_of_one_node_average_apart():
    """Each averager serves its own prefixed handles: the first one made on a node still
    finds its group when a second one is made (their handles once collided)."""
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        first, second = run_in_processes(two_averagers, [(peers, 1.0), (peers, 3.0)], timeout=120)
    assert first == second == [[2.0] * 4, [20.0] * 4]


def test_allreduce_weighted():
    weights = [0.5, 2.0, 3.5, 1.0]
    values = [[[float(i + 1)] * 10] for i in range(4)]
    modes = ["node", "client", "node", "client"]
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        reports = run_in_processes(average_once, [(peers, i, values[i], modes[i], weights[i], 4) for i in range(4)])
    expected = sum(w * (i + 1) for i, w in enumerate(weights)) / sum(weights)
    for _, _, tensors in reports:
        np.testing.assert_allclose(tensors[0], [expected] * 10, atol=1e-5)


def test_step_control_trigger_and_cancel():
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        results = run_in_processes(triggered_step, [(peers, 0, [1.0] * 4, False), (peers, 1, [3.0] * 4, False)])
    for size, tensor in results:
        assert size == 2
        assert tensor == [2.0] * 4
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        (cancelled,) = run_in_processes(triggered_step, [(peers, 0, [1.0], True)])
    assert cancelled == "CancelledError"


def test_load_state_from_peers():
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        tensors = [torch.zeros(5)]
        averager = apiary.DecentralizedAverager(tensors, root, start=True, prefix="state", allow_state_sharing=False)
        assert averager.load_state_from_peers(timeout=5) is None  # nobody shares yet
        donor = threading.Thread(target=lambda: run_in_processes(share_state, [(peers, [1.0, 2, 3, 4, 5], 12)]))
        donor.start()
        state = None
        deadline = time.time() + 10
        while state is None and time.time() < deadline:
            time.sleep(1.0)
            state = averager.load_state_from_peers(timeout=5)
        donor.join()
        assert state is not None
        metadata, loaded = state
        assert metadata == {"epoch": 7}
        assert loaded[0].tolist() == [1.0, 2, 3, 4, 5]
        assert tensors[0].tolist() == [0.0] * 5  # the averaged tensors are not changed
        averager.shutdown()


def _load_with_retries(averager, seconds):
    state, deadline = None, time.time() + seconds
    while state is None and time.time() < deadline:
        time.sleep(1.0)
        state = averager.load_state_from_peers(timeout=5)
    return state


@contextlib.contextmanager
def _beside_custom_state_donor(donor_seconds, donor_fails):
    """An averager of prefix "custom" that shares no state, beside a donor process of
    that prefix (share_custom_state) for `donor_seconds`; on leaving, the donor is joined
    and the averager shut down."""
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        averager = apiary.DecentralizedAverager([torch.zeros(2, 2)], root, start=True, prefix="custom",
                                                allow_state_sharing=False)
        donor = threading.Thread(
            target=lambda: run_in_processes(share_custom_state, [(peers, donor_seconds, donor_fails)]))
        donor.start()
        yield averager
        donor.join()
        averager.shutdown()


def test_overridden_current_state_with_its_dtypes_shapes_and_state_compression():
    with _beside_custom_state_donor(12, False) as averager:
        state = _load_with_retries(averager, 10)
    assert state is not None
    metadata, loaded = state
    assert metadata["step"] == 42 and "group_key" in metadata
    assert [t.dtype for t in loaded] == [torch.float32, torch.float64, torch.int64, torch.float16]
    assert [tuple(t.shape) for t in loaded] == [(2, 2), (2, 3), (1,), (4, 1)]
    # The live tensor as changed after start, through the adaptive state compression:
    # tensors of 4 elements or more as float16, the int64 one of 1 element as it is.
    assert loaded[0].tolist() == [[1.0, 2.0], [3.0, float(torch.tensor(1 / 3).half())]]
    assert loaded[1].tolist() == (torch.arange(6, dtype=torch.float64).reshape(2, 3) / 3).half().double().tolist()
    assert loaded[2].tolist() == [12345]
    assert loaded[3].tolist() == [[0.5]] * 4


def test_a_donor_whose_state_fails_gives_no_state(caplog):
    with _beside_custom_state_donor(10, True) as averager:
        deadline = time.time() + 8
        while "ZeroDivisionError" not in caplog.text and time.time() < deadline:
            time.sleep(1.0)
            assert averager.load_state_from_peers(timeout=5) is None
    assert "ZeroDivisionError" in caplog.text  # the donor's error came back with its name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA torch and a GPU (gpu)")
def test_cuda_tensors_average_in_place_on_their_gpu():
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        tensor = torch.full((1000,), 3.0, device="cuda")
        pointer = tensor.data_ptr()
        averager = apiary.DecentralizedAverager([tensor], root, start=True, prefix="mytest", target_group_size=2,
                                                min_matchmaking_time=2.0, request_timeout=1.0)
        other = threading.Thread(target=lambda: run_in_processes(
            average_once, [(peers, 1, [[1.0] * 1000], "node", 1.0, 2)]))
        other.start()
        averager.step(timeout=60)
        other.join()
        assert tensor.data_ptr() == pointer
        assert torch.allclose(tensor.cpu(), torch.full((1000,), 2.0))
        with pytest.raises(ValueError, match="one device"):
            apiary.DecentralizedAverager([tensor, torch.zeros(3)], root, start=True, prefix="mixed")
        averager.shutdown()


def test_other_float_dtypes_average_through_a_float32_copy():
    import numpy as np

    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        doubles = torch.full((6,), 1.0, dtype=torch.float64)
        halves = np.full((4,), 1.0, dtype=np.float16)
        pointer = doubles.data_ptr()
        averager = apiary.DecentralizedAverager([doubles, halves], root, start=True, prefix="mytest",
                                                target_group_size=2, min_matchmaking_time=2.0, request_timeout=1.0)
        other = threading.Thread(target=lambda: run_in_processes(
            average_once, [(peers, 1, [[3.0] * 6, [5.0] * 4], "node", 1.0, 2)]))
        other.start()
        control = averager.step(wait=False, require_trigger=True)
        doubles.fill_(2.0)  # after the step began: the values at the trigger count
        halves[:] = 3.0
        control.allow_allreduce()
        control.result(timeout=60)
        other.join()
        assert doubles.dtype == torch.float64 and doubles.data_ptr() == pointer  # the trainer's own tensor
        assert doubles.tolist() == [2.5] * 6
        assert halves.dtype == np.float16 and halves.tolist() == [4.0] * 4
        with averager.get_tensors() as tensors:
            assert tensors[0] is doubles and tensors[1] is halves
        averager.shutdown()


def test_bad_tensors_and_arguments_raise_clear_errors():
    with apiary.DHT() as dht:
        with pytest.raises(ValueError, match="floating-point"):
            apiary.DecentralizedAverager([torch.zeros(3, dtype=torch.int64)], dht, start=True, prefix="bad")
        with pytest.raises(ValueError, match="contiguous"):
            apiary.DecentralizedAverager([torch.zeros(4, 4).t()], dht, start=True, prefix="bad")
        with pytest.raises(TypeError):
            apiary.DecentralizedAverager([[1.0, 2.0]], dht, start=True, prefix="bad")
        with pytest.raises(ValueError):
            apiary.DecentralizedAverager([], dht, start=True, prefix="bad")
        with pytest.raises(ValueError):
            apiary.DecentralizedAverager([torch.zeros(3)], dht, start=True, prefix="bad", min_group_size=0)
        with pytest.raises(ValueError):
            apiary.DecentralizedAverager([torch.zeros(3)], dht, start=True, prefix="bad", auxiliary=True,
                                         client_mode=True)
        averager = apiary.DecentralizedAverager([np.zeros(3, dtype=np.float32)], dht, start=True, prefix="alone")
        with pytest.raises(TypeError):
            averager.step(gather=object(), timeout=1)
        # Nobody else: the step ends with an error once its timeout passes, nothing hangs.
        with pytest.raises(Exception) as failed:
            averager.step(timeout=2.0)
        assert not isinstance(failed.value, concurrent.futures.CancelledError)
        averager.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            averager.step()
    with pytest.raises(ValueError):
        apiary.DecentralizedAverager([torch.zeros(3)], dht, start=True, prefix="bad")  # a shut-down DHT
