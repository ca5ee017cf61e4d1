"""apiary.optim.DiLoCo: four peers in separate processes, each on its own shard of the
digits, H local Adam steps between rounds that average (compressed) pseudo-gradients and
apply them with an outer Nesterov SGD."""
import numpy as np
import pytest

import apiary
from optim_peers import diloco_digits_trainer, single_digits_trainer
from peers import PeerDied, run_in_processes

PEERS, ROUNDS, H, BATCH = 4, 6, 20, 32


def run_swarm(run_id, codec, streaming=False, peers=PEERS, rounds=ROUNDS, group_size=None):
    """The swarm's results. A peer that dies of a signal UCX 1.13's tcp sockcm raises now
    and then while connections open and close (SIGABRT: an assertion; SIGSEGV: a
    connection handed to a listener its transport destroyed at shutdown; both in
    transport/README.md) gets the swarm one more run, under another run id; anything
    else fails the test."""
    import time

    for attempt in range(2):
        with apiary.DHT() as root:
            initial = root.get_visible_maddrs()
            start_at = time.time() + 20  # every process has started by then
            try:
                return run_in_processes(diloco_digits_trainer, [
                    (initial, f"{run_id}_{attempt}", rank, peers, rounds, H, BATCH, codec, streaming, start_at,
                     group_size) for rank in range(peers)], timeout=300)
            except PeerDied as e:
                if e.exitcode not in (-6, -11) or attempt == 1:
                    raise
                print(f"{run_id}: {e}; running the swarm again")


def same_state_at_each_round(results):
    """The outer parameters every peer held at each round (after its outer step or its
    state download) are bit-identical: one outer state per round."""
    by_epoch = {}
    for _, outer, _, _ in results:
        for epoch, values in outer:
            by_epoch.setdefault(epoch, []).append(np.array(values, dtype=np.float32))
    for epoch, held in by_epoch.items():
        for values in held[1:]:
            assert np.array_equal(values, held[0]), f"outer parameters differ after round {epoch}"
    return by_epoch


def check_outer_steps(results):
    """Rounds only go forward and every peer ends at the last one; after each outer step,
    the peers that took it hold bit-identical outer parameters (8-bit pseudo-gradients
    included). A peer whose round failed (a reducer gave up on it) skips that step and
    loads the swarm's state at the next round instead, so it may miss an epoch."""
    for _, outer, _, _ in results:
        epochs = [epoch for epoch, _ in outer]
        assert epochs == sorted(set(epochs)) and epochs[-1] == ROUNDS, epochs
    by_epoch = same_state_at_each_round(results)
    assert len(by_epoch[ROUNDS]) == len(results)
    # Most rounds have every peer. How many is a matter of timing (a peer whose join request
    # went unanswered for request_timeout on a loaded machine averages in a smaller group
    # that takes no step): a majority of the rounds is the bar, not all but one.
    held = {epoch: len(peers) for epoch, peers in sorted(by_epoch.items())}
    deferred = [deferred for _, _, _, deferred in results]
    assert 2 * sum(count == len(results) for count in held.values()) > ROUNDS, (held, deferred)


@pytest.mark.parametrize("codec,tolerance", [("none", 0.05), ("uniform8", 0.07)])
def test_diloco_reaches_the_accuracy_of_one_peer_on_all_data(codec, tolerance):
    """Tolerance: the swarm's mean held-out accuracy within 0.05 of one peer trained on all
    the data with the same samples in all (PEERS * ROUNDS * H batches); with 8-bit
    pseudo-gradients within 0.07 (they land 0.048-0.053 below it here, 0.911-0.916 against
    0.964, depending on which rounds a peer joined late)."""
    results = run_swarm(f"diloco_{codec}", codec)
    (reference,) = run_in_processes(single_digits_trainer, [(PEERS * ROUNDS * H, BATCH)], timeout=120)
    accuracies = [accuracy for accuracy, _, _, _ in results]
    assert np.mean(accuracies) >= reference - tolerance, (accuracies, reference)
    check_outer_steps(results)


def test_streaming_diloco_converges_one_round_late():
    """Each average is applied a round late (the first round applies nothing), so after six
    outer steps the swarm is behind the reference (0.96 here); the bar is convergence:
    held-out accuracy >= 0.75 (chance: 0.1), with bit-identical outer parameters."""
    results = run_swarm("diloco_streaming", "blockwise8", streaming=True)
    accuracies = [accuracy for accuracy, _, _, _ in results]
    assert np.mean(accuracies) >= 0.75, accuracies
    check_outer_steps(results)


@pytest.mark.parametrize("streaming", [False, True])
def test_a_split_round_steps_once(streaming):
    """Groups of 3 in a swarm of 5: matchmaking splits every round. Only a group with a
    majority of the swarm takes the outer step; the others take none, and load the state
    of the peers that did once they find themselves behind. One outer state per round,
    and the swarm still goes forward."""
    results = run_swarm(f"diloco_split_{int(streaming)}", "none", streaming=streaming, peers=5, rounds=3,
                        group_size=3)
    by_epoch = same_state_at_each_round(results)
    # Split: a group took no step, or some peers reached a round only by downloading it.
    deferred = sum(deferred for _, _, _, deferred in results)
    stepped_by_some = [epoch for epoch, held in by_epoch.items() if len(held) < len(results)]
    assert deferred >= 1 or stepped_by_some, (deferred, {epoch: len(held) for epoch, held in by_epoch.items()})
    assert max(by_epoch) >= 2, sorted(by_epoch)


def majority(local_epoch, gathered, declared):
    """DiLoCo._majority of a peer at `local_epoch` whose group gathered `gathered`
    ({peer: round}) while the DHT holds the rounds `declared` ({peer: round})."""
    from types import SimpleNamespace

    entries = {peer: SimpleNamespace(value=epoch) for peer, epoch in declared.items()}
    dht = SimpleNamespace(get=lambda key, latest: SimpleNamespace(value=entries))
    peer = SimpleNamespace(local_epoch=local_epoch, run_id="unit", deferred_rounds=0,
                           averager=SimpleNamespace(prefix="unit_diloco", dht=dht))
    return apiary.optim.DiLoCo._majority(peer, gathered), peer.deferred_rounds


def test_one_group_of_a_round_holds_a_majority():
    """Which group of a round steps, with declarations that lag: the members at the round
    must be more than half of every peer at it or behind it (members included)."""
    swarm = {p: 2 for p in "abcde"}
    assert majority(2, {"a": 2, "b": 2, "c": 2}, swarm) == (True, 0)
    assert majority(2, {"d": 2, "e": 2}, swarm) == (False, 1)
    # c and d have reached round 2, but the DHT still says round 1: they count all the same.
    assert majority(2, {"a": 2, "b": 2}, dict(swarm, c=1, d=1)) == (False, 1)
    # A peer past the round: it was taken.
    assert majority(2, {"a": 2, "b": 2, "c": 2}, dict(swarm, d=3)) == (False, 1)
    # x at round 3 grouped with d and e, still at 2; y and z at 3 together. Members of
    # another round do not make x's majority, and d and e, behind, count against y and z:
    # neither group steps (counting only the peers that declare round 3, both would have).
    declared = {"x": 3, "y": 3, "z": 3, "d": 2, "e": 2}
    assert majority(3, {"x": 3, "d": 2, "e": 2}, declared) == (False, 1)
    assert majority(3, {"y": 3, "z": 3}, declared) == (False, 1)
    assert majority(3, {"x": 3, "y": 3, "z": 3}, declared) == (True, 0)


def test_bad_arguments():
    import torch

    with apiary.DHT() as dht:
        params = [torch.nn.Parameter(torch.zeros(3))]
        adam = lambda p: torch.optim.Adam(p)  # noqa: E731
        for kwargs, message in [(dict(inner_steps=0), "inner_steps"), (dict(outer_lr=0), "outer_lr"),
                                (dict(run_id=""), "run_id"), (dict(params=[]), "parameters"),
                                (dict(inner_optimizer=object()), "torch optimizer")]:
            with pytest.raises((ValueError, TypeError), match=message):
                apiary.optim.DiLoCo(**dict(dict(dht=dht, run_id="bad", params=params, inner_optimizer=adam), **kwargs))
