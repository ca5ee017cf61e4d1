"""apiary.optim.GradientAverager with hivemind's API (its test_grad_averager): two peers
in separate processes, one accumulating in buffers of its own, the other in .grad,
average their accumulated gradients weighted by samples, pre-scheduled or not."""
import threading

import pytest
import torch

import apiary
from apiary.optim import GradientAverager
from optim_peers import accumulate_and_average
from peers import run_in_processes


@pytest.mark.parametrize("pre_schedule", [True, False])
def test_grad_averager_weights_peers_by_samples(pre_schedule):
    prefix = f"grads{int(pre_schedule)}"
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        # Peer 1: own buffers, 4 batches of 2 of mse(w, 1): each gradient -2/25.
        # Peer 2: reuse_grad_buffers, 6 batches of 3 of mse(w, -1) summed in .grad (2/25 each).
        (c1, acc1, avg1, restored1, after1), (c2, acc2, avg2, restored2, after2) = run_in_processes(
            accumulate_and_average, [(peers, prefix, False, 4, 2, 1.0, pre_schedule),
                                     (peers, prefix, True, 6, 3, -1.0, pre_schedule)], timeout=120)
    assert c1 == (8, 4) and c2 == (18, 6)
    assert torch.allclose(torch.tensor(acc1), torch.full((5, 5), 4 * -2 / 25))
    assert torch.allclose(torch.tensor(acc2), torch.full((5, 5), 6 * 2 / 25))
    # Each loads sum / batches (-2/25 and 2/25) and the group weighs them by samples.
    reference = (8 * (-2 / 25) + 18 * (2 / 25)) / (8 + 18)
    assert torch.allclose(torch.tensor(avg1), torch.full((5, 5), reference), atol=1e-6)
    assert torch.allclose(torch.tensor(avg2), torch.full((5, 5), reference), atol=1e-6)
    # Outside the block .grad is the trainer's again, and the accumulators were reset.
    assert torch.allclose(torch.tensor(restored1), torch.zeros(5, 5))
    assert torch.allclose(torch.tensor(restored2), torch.zeros(5, 5))  # reset zeroes .grad when it accumulates
    assert after1 == after2 == 0


def test_grad_averager_bad_input():
    with apiary.DHT() as dht:
        w = torch.nn.Parameter(torch.zeros(3))
        averager = GradientAverager([w], dht=dht, prefix="bad", start=True)
        with pytest.raises(ValueError, match="batch_size"):
            averager.accumulate_grads_(0)
        with pytest.raises(ValueError, match="weight"):
            averager.schedule_step(weight=1.0)
        with pytest.raises(ValueError, match="shapes"):
            GradientAverager([w], dht=dht, prefix="bad2", averaged_grads=[torch.zeros(4)], start=True)
        with pytest.raises(ValueError, match="parameter"):
            GradientAverager([], dht=dht, prefix="bad3", start=True)
        averager.shutdown()
