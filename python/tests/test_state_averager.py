"""apiary.optim.TrainingStateAverager with hivemind's API (its test_state_averager and
test_load_state_from_peers): two peers average parameters, optimizer statistics and
extra tensors, at once or in the background; a newcomer loads the state of the most
advanced peer, with its epoch and learning rate."""
from functools import partial

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import apiary
from apiary.optim import TrainingStateAverager
from apiary.optim.state_averager import dump_optimizer_state, load_optimizer_state


def wait_for_donor(dht, prefix, priority=None, patience=10.0):
    """Until the DHT shows a donor of `prefix` (with `priority`, if given): a donor
    declares itself asynchronously, as in hivemind (whose test sleeps 0.1 s instead)."""
    import time

    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        found = dht.get(f"{prefix}.all_averagers", latest=True)
        if found is not None and isinstance(found.value, dict) and any(
                priority is None or v.value == priority for v in found.value.values()):
            return
        time.sleep(0.05)
    raise TimeoutError(f"no donor of {prefix} declared within {patience} s")


@pytest.mark.parametrize(
    "offload_optimizer, reuse_tensors, sync_epoch_when_averaging",
    [(False, False, False), (True, False, False), (False, True, True), (True, False, True)],
)
def test_state_averager(offload_optimizer, reuse_tensors, sync_epoch_when_averaging):
    torch.manual_seed(1337)
    with apiary.DHT() as dht1, apiary.DHT(initial_peers=dht1.get_visible_maddrs()) as dht2:
        model1, model2 = nn.Linear(2, 3), nn.Linear(2, 3)
        extras1 = (torch.randn(2, 2), -torch.rand(1))
        extras2 = (-torch.randn(2, 2), torch.rand(1))
        common = dict(
            optimizer=partial(torch.optim.Adam, lr=0.1, betas=(0.9, 0.9)),
            scheduler=partial(torch.optim.lr_scheduler.LambdaLR, lr_lambda=lambda t: 1.0 / max(1, t)),
            sync_epoch_when_averaging=sync_epoch_when_averaging, average_opt_statistics=("exp_avg_sq",),
            offload_optimizer=offload_optimizer, reuse_tensors=reuse_tensors, target_group_size=2,
            min_matchmaking_time=1.0, prefix=f"state{int(offload_optimizer)}{int(reuse_tensors)}")
        avgr1 = TrainingStateAverager(dht=dht1, params=model1.parameters(), extra_tensors=extras1, start=True, **common)
        avgr2 = TrainingStateAverager(dht=dht2, params=model2.parameters(), extra_tensors=extras2, start=True, **common)
        x = torch.ones(2)
        for step in range(20):
            F.mse_loss(model1(x), torch.ones(3)).mul(2).backward()
            work1 = avgr1.step(optimizer_step=True, zero_grad=True, averaging_round=(step == 10), delay_averaging=True)
            F.mse_loss(model2(x), -torch.ones(3)).backward()
            avgr2.step(optimizer_step=True, zero_grad=True, averaging_round=(step == 10), delay_averaging=False)
            if step == 10:
                work1.result(timeout=60)
        assert torch.all(model1.weight.grad == 0) and torch.all(model2.weight.grad == 0), "zero_grad did not run"
        assert model1(x).mean() > 0.5 and model2(x).mean() < -0.5, "the models did not train"
        assert torch.allclose(extras1[0], extras2[0]), "the first extra tensors were not averaged"
        assert torch.allclose(extras1[1], extras2[1]), "the second extra tensors were not averaged"

        stats1 = avgr1.optimizer.state_dict()["state"][0]["exp_avg_sq"].clone()
        stats2 = avgr2.optimizer.state_dict()["state"][0]["exp_avg_sq"].clone()
        assert not torch.allclose(stats1, stats2)

        avgr1.step(increment_epoch=True)
        avgr1.step(increment_epoch=True, averaging_round=True, delay_averaging=True)
        avgr2.step(increment_epoch=True, averaging_round=True, delay_averaging=True)
        avgr1.step(wait_for_delayed_updates=True)
        avgr2.step(wait_for_delayed_updates=True)

        assert torch.allclose(model1(x), model2(x)), "the parameters were not averaged"
        assert torch.allclose(avgr1.optimizer.state_dict()["state"][0]["exp_avg_sq"], (stats1 + stats2) / 2)
        assert torch.allclose(avgr2.optimizer.state_dict()["state"][0]["exp_avg_sq"], (stats1 + stats2) / 2)
        assert avgr1.local_epoch == 2
        assert avgr2.local_epoch == (2 if sync_epoch_when_averaging else 1)
        avgr1.shutdown()
        avgr2.shutdown()


def test_load_state_from_peers():
    with apiary.DHT() as dht1, apiary.DHT(initial_peers=dht1.get_visible_maddrs()) as dht2:
        model1, model2 = nn.Linear(2, 3), nn.Linear(2, 3)
        common = dict(
            optimizer=partial(torch.optim.SGD, lr=0.1, momentum=0.9),
            scheduler=partial(torch.optim.lr_scheduler.LambdaLR, lr_lambda=lambda t: 1.0 / max(1, t)),
            target_group_size=2, prefix="load_state")
        avgr1 = TrainingStateAverager(dht=dht1, params=model1.parameters(), allow_state_sharing=False, start=True,
                                      **common)
        avgr2 = TrainingStateAverager(dht=dht2, params=model2.parameters(), start=True, **common)
        # The donor trains a step (momentum buffers), then sits at epoch 1337.
        model2(torch.ones(2)).sum().backward()
        avgr2.step(optimizer_step=True, zero_grad=True)
        momentum = avgr2.optimizer.state[model2.weight]["momentum_buffer"].clone()
        avgr2.local_epoch = 1337
        avgr2.state_sharing_priority = 1337
        with torch.no_grad():
            model2.weight[...] = 42
        wait_for_donor(dht1, "load_state", 1337)

        assert avgr1.load_state_from_peers() is True
        assert avgr1.local_epoch == 1337
        assert torch.all(model1.weight == 42).item()
        assert torch.equal(model1.bias, model2.bias)
        assert avgr1.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 / 1337)
        assert torch.equal(avgr1.optimizer.state[model1.weight]["momentum_buffer"], momentum)

        # A donor behind this peer is refused ("cowardly"), and nothing changes.
        avgr1.local_epoch = 2000
        with torch.no_grad():
            model1.weight[...] = 7
        assert avgr1.load_state_from_peers() is False
        assert torch.all(model1.weight == 7).item() and avgr1.local_epoch == 2000
        avgr1.shutdown()
        avgr2.shutdown()


def test_a_chainable_scheduler_loads_with_the_state():
    """StepLR computes each rate from the last one: the newcomer takes the donor's rate
    and scheduler together (not the donor's rate decayed again by its own scheduler)."""
    with apiary.DHT() as dht1, apiary.DHT(initial_peers=dht1.get_visible_maddrs()) as dht2:
        common = dict(optimizer=partial(torch.optim.SGD, lr=0.1),
                      scheduler=partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5), prefix="steplr")
        donor = TrainingStateAverager(dht=dht2, params=nn.Linear(2, 3).parameters(), start=True, **common)
        newcomer = TrainingStateAverager(dht=dht1, params=nn.Linear(2, 3).parameters(), allow_state_sharing=False,
                                         start=True, **common)
        for epoch in range(1, 4):
            donor.step(increment_epoch=True, optimizer_step=True, zero_grad=True)
            donor.state_sharing_priority = epoch
        assert donor.local_epoch == 3 and donor.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**3)
        wait_for_donor(dht1, "steplr", 3)
        assert newcomer.load_state_from_peers() is True
        assert newcomer.local_epoch == 3
        assert newcomer.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**3)
        newcomer.step(increment_epoch=True)  # and it goes on from there
        assert newcomer.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**4)
        donor.shutdown()
        newcomer.shutdown()


def test_no_donor_and_wrong_model():
    with apiary.DHT() as dht1, apiary.DHT(initial_peers=dht1.get_visible_maddrs()) as dht2:
        lonely = TrainingStateAverager(dht=dht1, params=nn.Linear(2, 3).parameters(),
                                       optimizer=partial(torch.optim.SGD, lr=0.1), prefix="alone", start=True)
        assert lonely.load_state_from_peers(timeout=5) is False  # nobody shares: hivemind's None
        donor = TrainingStateAverager(dht=dht2, params=nn.Linear(4, 3).parameters(),
                                      optimizer=partial(torch.optim.SGD, lr=0.1), prefix="shapes", start=True)
        other = TrainingStateAverager(dht=dht1, params=nn.Linear(2, 3).parameters(), allow_state_sharing=False,
                                      optimizer=partial(torch.optim.SGD, lr=0.1), prefix="shapes", start=True)
        wait_for_donor(dht1, "shapes")
        with pytest.raises(ValueError, match="shape"):
            other.load_state_from_peers()
        for averager in (lonely, donor, other):
            averager.shutdown()


def test_bad_arguments():
    with apiary.DHT() as dht:
        params = list(nn.Linear(2, 3).parameters())
        sgd = partial(torch.optim.SGD, lr=0.1)
        with pytest.raises(ValueError, match="offload_optimizer needs an optimizer factory"):
            TrainingStateAverager(dht=dht, optimizer=torch.optim.SGD(params, lr=0.1), offload_optimizer=True,
                                  prefix="bad", start=True)
        with pytest.raises(ValueError, match="reuse_tensors and delta_rule_averaging"):
            TrainingStateAverager(dht=dht, params=params, optimizer=sgd, reuse_tensors=True,
                                  delta_rule_averaging=True, prefix="bad", start=True)
        with pytest.raises(ValueError, match="statistic 'exp_avg'"):
            TrainingStateAverager(dht=dht, params=params, optimizer=sgd, average_opt_statistics=("exp_avg",),
                                  prefix="bad", start=True)
        with pytest.raises(ValueError, match="each parameter once"):
            TrainingStateAverager(dht=dht, params=params + params[:1], optimizer=sgd, prefix="bad", start=True)
        with pytest.raises(ValueError, match="reuse_tensors needs contiguous float32"):
            TrainingStateAverager(dht=dht, params=[nn.Parameter(torch.zeros(3, dtype=torch.float64))],
                                  optimizer=sgd, reuse_tensors=True, prefix="bad", start=True)
        averager = TrainingStateAverager(dht=dht, params=params, optimizer=sgd, prefix="ok", start=True)
        with pytest.raises(ValueError, match="optimizer_step=True with delay_optimizer_step"):
            averager.step(delay_optimizer_step=True)
        with pytest.raises(ValueError, match="averaging_round=True"):
            averager.step(averaging_opts=dict(timeout=1))
        with pytest.raises(ValueError, match="grad_scaler"):
            averager.step(optimizer_step=True, grad_scaler=object())
        with pytest.raises(ValueError, match="NaN"):
            averager.state_sharing_priority = float("nan")
        averager.shutdown()


def test_optimizer_state_round_trip_and_initialization():
    model = nn.Linear(3, 2)
    adam = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    from apiary.optim.state_averager import _initialize_optimizer_state_

    _initialize_optimizer_state_(adam)
    # Statistics exist, and nothing else changed (weight decay would have moved the weights).
    assert all("exp_avg_sq" in adam.state[p] for p in model.parameters())
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
    assert all(float(adam.state[p]["step"]) == 0 for p in model.parameters())
    model(torch.ones(3)).sum().backward()
    adam.step()
    metadata, tensors = dump_optimizer_state(adam)
    apiary.MSGPackSerializer.dumps(metadata)  # travels as msgpack
    twin = torch.optim.Adam(nn.Linear(3, 2).parameters(), lr=0.5)
    load_optimizer_state(twin, apiary.MSGPackSerializer.loads(apiary.MSGPackSerializer.dumps(metadata)), tensors)
    assert twin.param_groups[0]["lr"] == 0.01 and twin.param_groups[0]["betas"] == (0.8, 0.99)
    for mine, theirs in zip(adam.state_dict()["state"].values(), twin.state_dict()["state"].values()):
        for key in mine:
            assert torch.equal(torch.as_tensor(mine[key]), torch.as_tensor(theirs[key]))
    with pytest.raises(ValueError, match="parameter groups"):
        load_optimizer_state(torch.optim.Adam([nn.Parameter(torch.zeros(1))]), metadata, tensors)
