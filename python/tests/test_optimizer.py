"""apiary.Optimizer with hivemind's API (its test_optimizer): peers in separate processes
train one model collaboratively, an epoch per target_batch_size samples of the swarm."""
import time
from functools import partial

import pytest

import apiary
from apiary.optim import PowerSGDGradientAverager
from optim_peers import constant_gradient_trainer, regression_trainer
from peers import run_in_processes


def _two_constant_gradient_peers(run_id, epochs, delayed):
    """constant_gradient_trainer's results in two processes of run `run_id` (gradients 1
    and 2, batches of 2 and 3 samples, 0.05 and 0.08 s a step), `epochs` epochs, started
    together."""
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        start_at = time.time() + 15  # both processes have started by then
        return run_in_processes(
            constant_gradient_trainer, [(peers, run_id, 0, 2, 0.05, epochs, 120, delayed, start_at),
                                        (peers, run_id, 1, 3, 0.08, epochs, 120, delayed, start_at)], timeout=180)


def test_epochs_step_with_the_sample_weighted_average_gradient():
    """Each peer's gradient is constant (c = 1 and c = 2): after each epoch both hold
    w_e = w_(e-1) - lr_e * (s1 * 1 + s2 * 2) / (s1 + s2), s the samples each gave that
    epoch, lr_e = 0.1 * 0.5**e (the scheduler follows the epoch)."""
    (log1, lr1, _), (log2, lr2, _) = _two_constant_gradient_peers("constant", 3, False)
    by_epoch1 = {before: (samples, w) for before, after, samples, w in log1}
    by_epoch2 = {before: (samples, w) for before, after, samples, w in log2}
    assert sorted(by_epoch1) == sorted(by_epoch2) == [0, 1, 2], (log1, log2)
    w = 0.0
    for epoch in range(3):
        (s1, w1), (s2, w2) = by_epoch1[epoch], by_epoch2[epoch]
        w -= 0.1 * 0.5**epoch * (s1 * 1 + s2 * 2) / (s1 + s2)
        assert w1 == pytest.approx([w] * 5, abs=1e-5), (epoch, s1, s2)
        assert w2 == pytest.approx([w] * 5, abs=1e-5), (epoch, s1, s2)
    assert lr1 == lr2 == pytest.approx(0.1 * 0.5**3)


def test_delayed_steps_apply_each_epoch_average_one_epoch_late():
    """delay_optimizer_step and delay_grad_averaging: each epoch's average is stepped in the
    background (the parameters change at a later step()); the last epoch's round never
    overlaps the next one's gradients. Once every delayed update is applied, both peers
    hold w = -sum_e lr_e * (s1 * 1 + s2 * 2) / (s1 + s2) over the epochs."""
    (log1, lr1, w1), (log2, lr2, w2) = _two_constant_gradient_peers("delayed", 4, True)
    samples1 = {before: samples for before, after, samples, _ in log1}
    samples2 = {before: samples for before, after, samples, _ in log2}
    assert sorted(samples1) == sorted(samples2) == [0, 1, 2, 3], (log1, log2)
    w = sum(-0.1 * 0.5**e * (samples1[e] * 1 + samples2[e] * 2) / (samples1[e] + samples2[e]) for e in range(4))
    assert w1 == pytest.approx([w] * 5, abs=1e-5)
    assert w2 == pytest.approx([w] * 5, abs=1e-5)


# hivemind's combinations: use_local_updates, delay_state_averaging, delay_optimizer_step,
# delay_grad_averaging, reuse_grad_buffers
COMBINATIONS = [
    (False, False, False, False, False),
    (False, True, False, False, False),
    (False, True, True, True, False),
    (False, False, False, False, True),
    (False, True, True, True, True),
    (False, True, True, False, True),
    (True, False, False, False, False),
    (True, True, False, False, False),
]


def _three_peers_train(run_id, options, total_epochs=3):
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        # Three peers of different speeds; the last is in client mode.
        results = run_in_processes(regression_trainer, [
            (peers, run_id, i, 4 + i, 0.15 + 0.1 * i, i == 2, options, total_epochs, 120) for i in range(3)],
            timeout=200)
    for r in results:
        assert r["epoch"] == total_epochs, r
        assert r["global_epoch"] >= total_epochs, r
        assert r["epochs_seen"] == sorted(r["epochs_seen"]), "an epoch went back"
        assert r["final_loss"] < r["initial_loss"], r
        assert r["lr"] == pytest.approx(0.1 * 0.5**total_epochs)
        assert r["alive"] == (False, False, False)
    # An epoch ends when the swarm's samples reach target_batch_size (32) or when its ETA
    # passes (hivemind's ready_to_update_epoch): the ETA extrapolates each peer's last report
    # by its speed, which can run ahead of the samples done by up to about one batch per
    # peer, so an epoch may close up to about that many samples early.
    total = sum(r["samples"] for r in results)
    batches = sum(4 + i for i in range(3))
    assert total >= total_epochs * (32 - batches), (total, results)


@pytest.mark.parametrize("local, delay_state, delay_step, delay_grads, reuse", COMBINATIONS)
def test_optimizer(local, delay_state, delay_step, delay_grads, reuse):
    options = dict(use_local_updates=local, delay_state_averaging=delay_state, delay_optimizer_step=delay_step,
                   delay_grad_averaging=delay_grads, reuse_grad_buffers=reuse)
    _three_peers_train("opt" + "".join(str(int(v)) for v in (local, delay_state, delay_step, delay_grads, reuse)),
                       options)


def test_optimizer_with_powersgd_gradients():
    """hivemind's grad_averager_factory=partial(PowerSGDGradientAverager, averager_rank=1):
    the 5 x 5 layer's gradients travel as rank-1 factors, the rest plainly; a client peer
    takes part in both phases."""
    _three_peers_train("opt_powersgd", dict(grad_averager_factory=partial(PowerSGDGradientAverager, averager_rank=1)))


def test_bad_arguments():
    import torch
    from functools import partial

    with apiary.DHT() as dht:
        params = [torch.nn.Parameter(torch.zeros(3))]
        sgd = partial(torch.optim.SGD, lr=0.1)
        common = dict(dht=dht, run_id="bad", target_batch_size=8, params=params, optimizer=sgd)
        for kwargs, message in [
            (dict(target_batch_size=0), "target_batch_size > 0"),
            (dict(run_id=""), "run_id"),
            (dict(params=None), "params with an optimizer factory"),
            (dict(delay_grad_averaging=True, delay_optimizer_step=False), "delay_optimizer_step"),
            (dict(delay_optimizer_step=True, offload_optimizer=False), "offload_optimizer=True"),
            (dict(use_local_updates=True, reuse_grad_buffers=True), "use_local_updates"),
            (dict(auxiliary=True, client_mode=True), "auxiliary"),
            (dict(average_state_every=0), "average_state_every"),
        ]:
            with pytest.raises(ValueError, match=message):
                apiary.Optimizer(**dict(common, **kwargs))
        opt = apiary.Optimizer(**common, reuse_grad_buffers=True, matchmaking_time=1.0)
        with pytest.raises(ValueError, match="batch_size"):
            opt.step()
        with pytest.raises(ValueError, match="zero_grad"):
            opt.zero_grad()
        with pytest.raises(ValueError, match="grad_scaler"):
            opt.step(batch_size=1, grad_scaler=object())
        opt.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            opt.step(batch_size=1)
