"""apiary.moe with real expert servers in processes of their own, over UCX on loopback:
hivemind's test_moe.py / test_dht_experts.py / test_connection_handler.py behaviours."""
import functools
import os

import pytest
import torch

import apiary
from apiary.moe import (ExpertInfo, RemoteExpert, Server, background_server, declare_experts, get_experts,
                        is_valid_prefix, is_valid_uid)

HERE = os.path.dirname(os.path.abspath(__file__))


def client_dht(info):
    return apiary.DHT(initial_peers=info.initial_peers, start=True)


def test_remote_module_call():
    with background_server(expert_uids=["expert.0"], expert_cls="ffn", hidden_dim=16, optim_cls=None) as info:
        dht = client_dht(info)
        (expert,) = get_experts(dht, ["expert.0"])
        assert expert is not None and expert.expert_info.address == info.address
        x1, x3 = torch.randn(1, 16), torch.randn(3, 16, requires_grad=True)
        assert expert(x1).shape == (1, 16)
        out = expert(x3)
        assert out.shape == (3, 16)
        # rows are independent: a sub-batch gives the same rows
        assert torch.allclose(expert(x3[1:2].detach()), out[1:2], atol=1e-5)
        (out * torch.randn_like(out)).sum().backward()
        assert x3.grad is not None and x3.grad.abs().sum() > 0

        with pytest.raises(ValueError, match="11"):
            expert(torch.randn(3, 11))
        with pytest.raises(LookupError, match="expert.1"):
            RemoteExpert(ExpertInfo("expert.1", info.address), dht)(x1)
        # the server is still healthy
        assert torch.allclose(expert(x1), expert(x1))
        dht.shutdown()


def test_backward_steps_the_server_optimizer():
    sgd = functools.partial(torch.optim.SGD, lr=0.5)
    with background_server(expert_uids=["ffn.0"], expert_cls="ffn", hidden_dim=8, optim_cls=sgd) as info:
        dht = client_dht(info)
        (expert,) = get_experts(dht, ["ffn.0"])
        x = torch.randn(4, 8)
        before = expert(x)
        (expert(x) * torch.randn(4, 8)).sum().backward()
        assert not torch.allclose(expert(x), before), "a backward must step the server's optimizer"
        dht.shutdown()


def test_determinism():
    with background_server(expert_uids=["expert.0"], expert_cls="det_dropout", hidden_dim=32, optim_cls=None) as info:
        dht = client_dht(info)
        (expert,) = get_experts(dht, ["expert.0"])
        x = torch.randn(5, 32, requires_grad=True)
        mask = torch.randint(0, 2, (5, 32))
        out = expert(x, mask)
        out.sum().backward()
        grad = x.grad.clone()
        x.grad = None
        out_rerun = expert(x, mask)
        out_rerun.sum().backward()
        assert torch.equal(out, out_rerun) and torch.equal(grad, x.grad)
        assert (out[mask == 0] == 0).all()
        dht.shutdown()


def test_nop_delay_timeout_and_module_errors():
    with background_server(expert_uids=["slow.0"], expert_cls="nop_delay", hidden_dim=4, optim_cls=None) as info:
        dht = client_dht(info)
        patient = RemoteExpert(ExpertInfo("slow.0", info.address), dht, timeout=10)
        x = torch.randn(2, 4)
        assert torch.equal(patient(x), x)  # also connects this peer to the server
        impatient = RemoteExpert(ExpertInfo("slow.0", info.address), dht, timeout=0.25)
        with pytest.raises(TimeoutError):
            impatient(torch.randn(2, 4))  # the nop_delay expert takes 0.5 s
        dht.shutdown()
    with background_server(expert_uids=["nan.0"], expert_cls="nan_raises", hidden_dim=4, optim_cls=None,
                           custom_module_path=os.path.join(HERE, "moe_custom_experts.py")) as info:
        dht = client_dht(info)
        (expert,) = get_experts(dht, ["nan.0"])
        with pytest.raises(RuntimeError, match="NaN in the expert's input"):
            expert(torch.full((2, 4), float("nan")))
        assert expert(torch.ones(2, 4)).shape == (2, 4)  # still serving
        dht.shutdown()


def test_server_killed_gives_a_clear_error():
    with background_server(expert_uids=["nop.0"], expert_cls="nop_delay", hidden_dim=4, optim_cls=None) as info:
        dht = client_dht(info)
        expert = RemoteExpert(ExpertInfo("nop.0", info.address), dht, timeout=20)
        expert.info
        os.kill(info.pid, 9)
        with pytest.raises((ConnectionError, TimeoutError)):
            expert(torch.randn(2, 4))
        dht.shutdown()


def test_dht_layout():
    dht = apiary.DHT(start=True)
    peer = apiary.DHT(initial_peers=dht.get_visible_maddrs(), start=True)
    assert all(declare_experts(dht, ["expert.1", "expert.2", "expert.3"], expiration=30).values())
    stored = declare_experts(dht, ["ffn.1", "ffn.2"], expiration=30)
    assert len(stored) == 4 and all(stored.values())
    stored = declare_experts(dht, ["e.1.2.3", "e.1.2.5", "e.2.0"], expiration=30)
    assert len(stored) == 7 and all(stored.values())
    assert ("e.1.", 2) in stored and "e." not in stored
    found = get_experts(peer, ["expert.3", "ffn.2", "e.1.2.5", "ffn.3"])
    assert [e.uid if e else None for e in found] == ["expert.3", "ffn.2", "e.1.2.5", None]
    assert found[0].expert_info.address == dht._require().address()
    with pytest.raises(ValueError):
        declare_experts(dht, ["not a uid"])
    peer.shutdown()
    dht.shutdown()


def test_uid_patterns():
    for uid in ["ffn.0", "ffn.12.34", "expert.1.2.3", "ёлка.3", "transformer.9"]:
        assert is_valid_uid(uid), uid
    for uid in ["ffn", "ffn.", "ffn.01", "ffn.-1", ".0", "transformer.encoder.2", "a.b.1", "ffn.1.", "ffn..1"]:
        assert not is_valid_uid(uid), uid
    for prefix in ["ffn.", "ffn.0.", "ёлка.3.12."]:
        assert is_valid_prefix(prefix), prefix
    for prefix in ["ffn", "ffn.0", "ffn.01.", ".", "a.b."]:
        assert not is_valid_prefix(prefix), prefix


def test_checkpoint_restores_experts_bit_for_bit(tmp_path):
    dht = apiary.DHT(start=True)
    sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)
    kwargs = dict(expert_uids=["ffn.0", "ffn.1"], expert_cls="ffn", hidden_dim=8, optim_cls=sgd, dht=dht,
                  checkpoint_dir=str(tmp_path), update_period=5)
    server = Server.create(start=True, seed=1, **kwargs)
    client = apiary.DHT(initial_peers=dht.get_visible_maddrs(), start=True)
    (expert,) = get_experts(client, ["ffn.1"])
    (expert(torch.randn(3, 8)) ** 2).sum().backward()
    server.shutdown()
    trained = {uid: b.state_dict() for uid, b in server.module_backends.items()}
    restored = Server.create(start=False, seed=2, **kwargs)  # other initial values, then the checkpoints
    for uid, backend in restored.module_backends.items():
        state = backend.state_dict()
        for name, value in trained[uid]["module"].items():
            assert torch.equal(state["module"][name], value), (uid, name)
        assert state["optimizer"]["state"].keys() == trained[uid]["optimizer"]["state"].keys()
    assert (tmp_path / "ffn.1" / "checkpoint_last.pt").exists()
    restored.shutdown()
    client.shutdown()
    dht.shutdown()


def test_builtin_classes_serve_and_train():
    dht = apiary.DHT(start=True)
    client = apiary.DHT(initial_peers=dht.get_visible_maddrs(), start=True)
    sgd = functools.partial(torch.optim.SGD, lr=0.1)
    # one server per DHT node (each its own PeerID), all in this process
    nodes = [apiary.DHT(initial_peers=dht.get_visible_maddrs(), start=True) for _ in range(4)]
    servers = [Server.create(expert_uids=[f"{cls}.0"], expert_cls=cls, hidden_dim=32, optim_cls=sgd, dht=node,
                             start=True) for cls, node in zip(("ffn", "transformer", "nop", "det_dropout"), nodes)]
    with pytest.raises(ValueError, match="serves experts already"):
        Server.create(expert_uids=["ffn.1"], hidden_dim=32, dht=nodes[0], start=True)
    ffn, transformer, nop, dropout = get_experts(client, ["ffn.0", "transformer.0", "nop.0", "det_dropout.0"])
    x = torch.randn(2, 32, requires_grad=True)
    seq = torch.randn(2, 128, 32, requires_grad=True)  # the built-in transformer takes 128 positions
    padding = torch.zeros(2, 128, dtype=torch.bool)
    padding[1, 100:] = True
    out = transformer(seq, padding)
    assert out.shape == (2, 128, 32) and torch.isfinite(out).all()
    out.sum().backward()
    assert seq.grad is not None and seq.grad.abs().sum() > 0
    assert torch.equal(nop(x), x)
    mask = torch.randint(0, 2, (2, 32))
    assert ((dropout(x, mask) == 0) | (mask == 1)).all()
    (ffn(x) * torch.randn(2, 32)).sum().backward()
    assert x.grad.abs().sum() > 0
    for server, node in zip(servers, nodes):
        server.shutdown()
        node.shutdown()
    client.shutdown()
    dht.shutdown()


def test_remote_expert_outliving_its_runtime_stops_it():
    """The last handle of a process's runtime may be a RemoteExpert, dropped while the
    runtime's threads still free an in-process server's torch modules (which needs the
    GIL): the runtime stops, and the modules are freed, without a deadlock."""
    from apiary.moe import ModuleBackend, name_to_block
    from apiary.moe.schema import BatchTensorDescriptor
    for _ in range(5):
        dht = apiary.DHT(start=True)
        module = name_to_block["ffn"](16)
        backends = {"expert.0": ModuleBackend("expert.0", module, args_schema=(BatchTensorDescriptor(16),),
                                              optimizer=torch.optim.SGD(module.parameters(), lr=0.01))}
        server = Server(dht, backends, start=True)
        client = apiary.DHT(initial_peers=dht.get_visible_maddrs(), start=True)
        expert = RemoteExpert(ExpertInfo("expert.0", server.address), client)
        expert(torch.randn(3, 16, requires_grad=True)).sum().backward()
        server.shutdown()
        client.shutdown()
        dht.shutdown()
        del server, backends, module
        del expert  # the runtime's last handle
