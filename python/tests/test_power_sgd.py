"""apiary.optim.PowerSGDGradientAverager (hivemind's PowerSGDGradientAverager): three peers
in separate processes average their gradients as low-rank factors, two all-reduces per
round on one group, with error feedback."""
import pytest
import torch

import apiary
from apiary.optim import Optimizer, PowerSGDGradientAverager
from optim_peers import powersgd_peer
from peers import run_in_processes


def _run(prefix, rank, ratio, rounds):
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        return run_in_processes(powersgd_peer, [(peers, prefix, i, rank, ratio, rounds) for i in range(3)],
                                timeout=60 + 15 * rounds)


def test_full_rank_factors_give_the_exact_mean():
    # Rank 24 = rows of the 24 x 32 weight: P is a basis of the whole column space, so
    # P Q^T = P P^T M is the group's mean itself. The bias is averaged plainly in phase Q.
    out = _run("psgd_full", 24, -100.0, 1)
    mean_w = sum(torch.tensor(w) for w, _, _, _, _ in out) / 3
    mean_b = sum(torch.tensor(b) for _, b, _, _, _ in out) / 3
    for _, _, results, compressed, _ in out:
        assert compressed == [0]
        weight, bias, group = results[0]
        assert group == 3
        assert torch.allclose(torch.tensor(weight), mean_w, atol=1e-4)
        assert torch.allclose(torch.tensor(bias), mean_b, atol=1e-6)


def test_low_rank_rounds_agree_and_error_feedback_makes_them_unbiased():
    rounds = 24
    out = _run("psgd_rank2", 2, 0.5, rounds)
    mean_w = sum(torch.tensor(w) for w, _, _, _, _ in out) / 3
    mean_b = sum(torch.tensor(b) for _, b, _, _, _ in out) / 3
    first = torch.tensor(out[0][2][0][0])
    for _, _, results, compressed, sizes in out:
        assert compressed == [0]
        assert sizes == 2 * (24 + 32) + 24  # P and Q of the weight, the bias whole
        for weight, bias, group in results:
            assert group == 3
            assert torch.linalg.matrix_rank(torch.tensor(weight), atol=1e-4) <= 2  # a rank-2 average
            assert torch.allclose(torch.tensor(bias), mean_b, atol=1e-6)
        # Every member of the group ends a round with the same average.
        assert torch.allclose(torch.tensor(results[0][0]), first, atol=1e-5)
    # The same gradients every round: what a round leaves out is sent later, so the mean of
    # the rounds' averages tends to the true mean. Rank 2 of a 24 x 32 matrix needs about
    # 12 rounds to have sent every direction once; from there the error falls as 1 / rounds.
    applied = [torch.tensor(r[0]) for r in out[0][2]]

    def error_after(n):
        return float((sum(applied[:n]) / n - mean_w).norm() / mean_w.norm())

    assert error_after(1) > 0.5  # one round's rank-2 average loses most of a random mean
    assert error_after(24) < error_after(12) < error_after(1)
    assert error_after(24) < 0.45 * error_after(1)


def test_powersgd_bad_arguments():
    with apiary.DHT() as dht:
        model = torch.nn.Linear(4, 3)
        with pytest.raises(ValueError, match="averager_rank"):
            PowerSGDGradientAverager(model.parameters(), 0, dht=dht, prefix="psgd_bad")
        with pytest.raises(ValueError, match="identical_results"):
            PowerSGDGradientAverager(model.parameters(), 1, dht=dht, prefix="psgd_bad", identical_results=True)
