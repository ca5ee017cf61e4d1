"""Averaging peers for test_averaging.py (module-level: they run in spawned processes)."""
import time

import torch

import apiary


def average_once(initial_peers, index, values, mode, weight, group_size, timeout=60):
    """One averager: a step with its `values`; returns its tensors, the gathered data and its PeerID."""
    with apiary.DHT(initial_peers=initial_peers, client_mode=(mode == "client")) as dht:
        tensors = [torch.tensor(v, dtype=torch.float32) for v in values]
        averager = apiary.DecentralizedAverager(
            tensors, dht, start=True, prefix="mytest", target_group_size=group_size,
            min_matchmaking_time=2.0, request_timeout=1.0, auxiliary=(mode == "aux"),
        )
        gathered = averager.step(gather={"index": index}, weight=weight, timeout=timeout)
        with averager.get_tensors() as averaged:
            out = [t.tolist() for t in averaged]
        averager.shutdown()
        return str(dht.peer_id), {str(k): v for k, v in gathered.items()}, out


def average_as_member(initial_peers, authority_path, values):
    """An averager over a DHT of `authority_path`'s swarm: one step with a group of two;
    returns its averaged tensor."""
    with apiary.DHT(initial_peers=initial_peers, authority_path=authority_path) as dht:
        averager = apiary.DecentralizedAverager(
            [torch.tensor(values, dtype=torch.float32)], dht, start=True, prefix="members", target_group_size=2,
            min_matchmaking_time=2.0, request_timeout=1.0,
        )
        averager.step(timeout=60)
        with averager.get_tensors() as averaged:
            out = averaged[0].tolist()
        averager.shutdown()
        return out


def triggered_step(initial_peers, index, values, cancel):
    """A require_trigger step: cancelled when `cancel`, else triggered after a while."""
    with apiary.DHT(initial_peers=initial_peers) as dht:
        tensors = [torch.tensor(values, dtype=torch.float32)]
        averager = apiary.DecentralizedAverager(
            tensors, dht, start=True, prefix="trig", target_group_size=2, min_matchmaking_time=2.0,
            request_timeout=1.0,
        )
        control = averager.step(require_trigger=True, wait=False, timeout=30)
        time.sleep(3.0)
        if cancel:
            control.cancel()
            try:
                control.result(timeout=30)
                return "finished"
            except Exception as e:  # noqa: BLE001 - the test checks which
                return type(e).__name__
        control.allow_allreduce()
        control.allow_allreduce()  # harmless when repeated
        gathered = control.result(timeout=30)
        return len(gathered), tensors[0].tolist()


def share_state(initial_peers, values, seconds):
    """A donor: shares its tensors and metadata for `seconds`."""
    with apiary.DHT(initial_peers=initial_peers) as dht:
        tensors = [torch.tensor(values, dtype=torch.float32)]
        averager = apiary.DecentralizedAverager(
            tensors, dht, start=True, prefix="state", state_sharing_priority=5.0, declare_state_period=2.0,
        )
        averager.set_state_metadata({"epoch": 7})
        time.sleep(seconds)
        averager.shutdown()
        return str(dht.peer_id)


class _StatefulAverager(apiary.DecentralizedAverager):
    """Shares more than its averaged tensors, as a trainer with optimizer statistics does."""

    def get_current_state(self):
        metadata, tensors, infos = super().get_current_state()
        extra = [torch.arange(6, dtype=torch.float64).reshape(2, 3) / 3, torch.tensor([12345], dtype=torch.int64),
                 torch.full((4, 1), 0.5, dtype=torch.float16)]
        extra_infos = [apiary.CompressionInfo.from_tensor(t, key=f"extra{i}") for i, t in enumerate(extra)]
        return dict(metadata, step=42), list(tensors) + extra, list(infos) + extra_infos


def share_custom_state(initial_peers, seconds, broken):
    """A donor whose get_current_state adds tensors of other dtypes and shapes (or raises,
    when `broken`); its averaged tensor changes after it started, as training does."""
    with apiary.DHT(initial_peers=initial_peers) as dht:
        tensors = [torch.zeros(2, 2)]
        averager = _StatefulAverager(tensors, dht, start=True, prefix="custom", state_sharing_priority=5.0,
                                     declare_state_period=2.0,
                                     state_compression=apiary.SizeAdaptiveCompression(
                                         4, apiary.NoCompression(), apiary.Float16Compression()))
        if broken:
            averager.get_current_state = lambda: 1 / 0
        tensors[0] += torch.tensor([[1.0, 2.0], [3.0, 1.0 / 3.0]])  # in place, after start
        time.sleep(seconds)
        averager.shutdown()
        return str(dht.peer_id)


def two_averagers(initial_peers, base):
    """A peer whose one DHT node runs two averagers (prefixes "<base>a" and "<base>b", as an
    optimizer runs its gradient and state averagers) stepping at once; returns what each
    averaged."""
    import numpy as np

    with apiary.DHT(initial_peers=initial_peers) as dht:
        mine = [np.full(4, base, dtype=np.float32), np.full(4, 10 * base, dtype=np.float32)]
        kw = dict(start=True, target_group_size=2, min_matchmaking_time=1.0, request_timeout=1.0)
        first = apiary.DecentralizedAverager([mine[0]], dht, prefix="pair_a", **kw)
        second = apiary.DecentralizedAverager([mine[1]], dht, prefix="pair_b", **kw)
        when = apiary.get_dht_time() + 1.0
        controls = [a.step(wait=False, timeout=30, scheduled_time=when) for a in (first, second)]
        for control in controls:
            control.result()
        first.shutdown()
        second.shutdown()
        return [m.tolist() for m in mine]
