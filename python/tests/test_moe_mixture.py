"""apiary.moe's mixtures with real expert servers in processes of their own, over UCX
on loopback: RemoteMixtureOfExperts, RemoteSwitchMixtureOfExperts, the call of many
experts at once, the beam search over the DHT (hivemind's test_moe.py behaviours)."""
import functools
import os
import threading
import time

import pytest
import torch

import apiary
from apiary.moe import (ExpertInfo, ModuleBackend, MoEBeamSearcher, RemoteExpert, RemoteMixtureOfExperts,
                        RemoteSwitchMixtureOfExperts, Server, background_server, create_remote_experts,
                        declare_experts, name_to_block)
from apiary.moe.call_many import Options, RemoteCallMany
from apiary.moe.client import DUMMY
from apiary.moe.schema import BatchTensorDescriptor


def client_dht(info):
    return apiary.DHT(initial_peers=info.initial_peers, start=True)


def test_moe_forward_backward():
    with background_server(expert_pattern="expert.[0:3].[0:3].[0:3]", num_experts=10, expert_cls="ffn",
                           hidden_dim=16, optim_cls=functools.partial(torch.optim.SGD, lr=0.01)) as info:
        assert len(info.uids) == 10
        dht = client_dht(info)
        moe = RemoteMixtureOfExperts(in_features=16, grid_size=(4, 4, 4), dht=dht, k_best=3, uid_prefix="expert.")
        for _ in range(3):
            x = torch.randn(10, 16, requires_grad=True)
            out = moe(x)
            assert out.shape == (10, 16) and torch.isfinite(out).all()
            out.sum().backward()
            assert x.grad is not None and moe.proj.weight.grad is not None
        dht.shutdown()


def test_call_many_masks_and_references():
    with background_server(expert_uids=[f"expert.{i}" for i in range(5)], expert_cls="ffn", hidden_dim=16,
                           optim_cls=None) as info:
        dht = client_dht(info)
        e0, e1, e2, e3, e4 = create_remote_experts([ExpertInfo(f"expert.{i}", info.address) for i in range(5)], dht)
        e5 = RemoteExpert(ExpertInfo("expert.99", info.address), dht)  # not served
        inputs = torch.randn(4, 16, requires_grad=True)
        options = Options(1, 1, None, None, None, False, False)
        mask, outputs = RemoteCallMany.apply(DUMMY, [[e0, e1, e2], [e2, e4], [e1, e5, e3], []],
                                             (e1.info["outputs_schema"],), options, inputs)
        assert mask.tolist() == [[True, True, True], [True, True, False], [True, False, True],
                                 [False, False, False]]
        reference = torch.zeros_like(outputs)
        reference[0, 0], reference[0, 1], reference[0, 2] = e0(inputs[0:1]), e1(inputs[0:1]), e2(inputs[0:1])
        reference[1, 0], reference[1, 1] = e2(inputs[1:2]), e4(inputs[1:2])
        reference[2, 0], reference[2, 2] = e1(inputs[2:3]), e3(inputs[2:3])
        assert torch.allclose(outputs, reference, atol=1e-5)

        weights = torch.randn_like(outputs)
        (outputs * weights).sum().backward()
        alt = inputs.detach().clone().requires_grad_(True)
        (reference_from(alt, [[e0, e1, e2], [e2, e4], [e1, None, e3], []]) * weights).sum().backward()
        assert torch.allclose(inputs.grad, alt.grad, atol=1e-5)
        dht.shutdown()


def reference_from(inputs, experts):
    rows = []
    for i, sample in enumerate(experts):
        row = [e(inputs[i:i + 1])[0] if e is not None else torch.zeros(inputs.shape[1]) for e in sample]
        row += [torch.zeros(inputs.shape[1])] * (3 - len(row))
        rows.append(torch.stack(row))
    return torch.stack(rows)


def test_switch_moe_with_no_experts_in_time():
    with background_server(expert_pattern="expert.[0:8].[0:8]", num_experts=8, expert_cls="nop_delay",
                           hidden_dim=16, optim_cls=None) as info:
        dht = client_dht(info)
        moe = RemoteSwitchMixtureOfExperts(in_features=16, grid_size=(8, 8), dht=dht, uid_prefix="expert.",
                                           forward_timeout=0.1, backward_timeout=0.1, allow_zero_outputs=True)
        for _ in range(3):
            x = torch.randn(4, 16, requires_grad=True)
            out, balancing_loss = moe(x)
            assert out.shape == (4, 16) and torch.equal(out, torch.zeros_like(out))
            (out.sum() + balancing_loss).backward()
        dht.shutdown()


def test_switch_moe_trains():
    with background_server(expert_pattern="expert.[0:4].[0:4]", num_experts=8, expert_cls="ffn",
                           hidden_dim=16, optim_cls=functools.partial(torch.optim.SGD, lr=0.01)) as info:
        dht = client_dht(info)
        moe = RemoteSwitchMixtureOfExperts(in_features=16, grid_size=(4, 4), dht=dht, uid_prefix="expert.")
        x = torch.randn(8, 16, requires_grad=True)
        out, balancing_loss = moe(x)
        assert out.shape == (8, 16) and out.abs().sum() > 0 and balancing_loss.item() > 0
        (out.sum() + balancing_loss).backward()
        assert moe.proj.weight.grad.abs().sum() > 0
        dht.shutdown()


def test_beam_search_equals_exhaustive_top_k():
    dht = apiary.DHT(start=True)
    client = apiary.DHT(initial_peers=dht.get_visible_maddrs(), start=True)
    uids = [f"ffn.{i}.{j}.{k}" for i in range(5, 15) for j in range(10, 20) for k in range(15, 25)]
    assert all(declare_experts(dht, uids, expiration=300, address=dht._require().address()).values())
    searcher = MoEBeamSearcher(client, "ffn.", (32, 32, 32))
    coords = torch.tensor([[int(c) for c in uid.split(".")[1:]] for uid in uids])
    for _ in range(25):
        scores = torch.randn(3, 32)
        best = searcher.find_best_experts(list(scores), beam_size=4)
        totals = scores[0, coords[:, 0]] + scores[1, coords[:, 1]] + scores[2, coords[:, 2]]
        expected = torch.topk(totals, k=4).values
        got = torch.tensor([sum(scores[d, int(c)] for d, c in enumerate(e.uid.split(".")[1:])) for e in best])
        assert torch.allclose(got, expected), (got, expected)
    client.shutdown()
    dht.shutdown()


def test_compute_expert_scores():
    dht = apiary.DHT(start=True)
    moe = RemoteMixtureOfExperts(in_features=16, grid_size=(40,), dht=dht, k_best=4, uid_prefix="expert.")
    gx, gy = torch.randn(4, 5, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    ii = [[4, 0, 2], [3, 1, 1, 1, 3], [0], [3, 2]]
    jj = [[2, 2, 1], [0, 1, 2, 0, 1], [0], [1, 2]]
    batch_experts = [[RemoteExpert(ExpertInfo(f"expert.{ii[b][e]}.{jj[b][e]}", dht._require().address()), dht)
                      for e in range(len(ii[b]))] for b in range(len(ii))]
    logits = moe.compute_expert_scores([gx, gy], batch_experts)
    torch.softmax(logits, dim=-1).norm(dim=-1).mean().backward()
    assert gx.grad.norm().item() > 0 and gy.grad.norm().item() > 0
    for b in range(len(ii)):
        for e in range(len(ii[b])):
            assert torch.allclose(logits[b, e], gx[b, ii[b][e]] + gy[b, jj[b][e]]), (b, e)
        assert (logits[b, len(ii[b]):] == float("-inf")).all()
    dht.shutdown()


def test_client_anomaly_detection():
    dht = apiary.DHT(start=True)
    torch.manual_seed(0)
    backends = {}
    for i in range(4):
        module = name_to_block["ffn"](16)
        backends[f"expert.{i}"] = ModuleBackend(f"expert.{i}", module, args_schema=(BatchTensorDescriptor(16),),
                                                optimizer=torch.optim.SGD(module.parameters(), lr=0.01))
    backends["expert.3"].module.ffn.weight.data[0, 0] = float("nan")
    server = Server(dht, backends, start=True)
    client = apiary.DHT(initial_peers=dht.get_visible_maddrs(), start=True)
    moe = RemoteMixtureOfExperts(in_features=16, grid_size=(4,), dht=client, k_best=3, uid_prefix="expert.",
                                 detect_anomalies=True)
    x = torch.randn(3, 16)
    x[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        moe(x)
    x = torch.randn(3, 16, requires_grad=True)
    out = moe(x)
    assert torch.isfinite(out).all(), "the expert answering NaN must be masked out"
    with pytest.raises(ValueError, match="NaN"):
        (out * float("nan")).sum().backward()
    x.grad = None
    moe(x).sum().backward()
    assert torch.isfinite(x.grad).all()
    server.shutdown()
    client.shutdown()
    dht.shutdown()


def test_server_killed_mid_batch():
    with background_server(expert_uids=["mix.0.0", "mix.0.1"], expert_cls="nop", hidden_dim=8, optim_cls=None) as fast, \
            background_server(expert_uids=["mix.1.0", "mix.1.1"], expert_cls="nop_delay", hidden_dim=8,
                              optim_cls=None, initial_peers=fast.initial_peers) as slow:
        dht = client_dht(fast)
        moe = RemoteMixtureOfExperts(in_features=8, grid_size=(2, 2), dht=dht, k_best=4, uid_prefix="mix.",
                                     k_min=1, forward_timeout=20)
        x = torch.randn(2, 8)
        threading.Timer(0.2, lambda: os.kill(slow.pid, 9)).start()  # during the slow experts' 0.5 s batch
        start = time.monotonic()
        out = moe(x)
        assert torch.isfinite(out).all() and time.monotonic() - start < 15
        # one sample has 2 live experts of its 4: below k_min 3 is an error naming the dead ones
        strict = RemoteMixtureOfExperts(in_features=8, grid_size=(2, 2), dht=dht, k_best=4, uid_prefix="mix.",
                                        k_min=3, forward_timeout=20)
        with pytest.raises((ConnectionError, TimeoutError), match="mix.1"):
            strict(torch.randn(1, 8))
        dht.shutdown()
