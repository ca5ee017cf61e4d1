"""apiary.DHT with hivemind's API: peers in separate processes over UCX on loopback
(hivemind's test_dht.py test_get_store and test_dht_get_visible_maddrs, and bad input)."""
import concurrent.futures
import os
import tempfile

import pytest

import apiary
from apiary import MSGPackSerializer
from dht_peers import join_with, join_with_authority, store_and_report
from peers import run_in_processes


def test_store_get_across_processes():
    with apiary.DHT() as root:
        peers = root.get_visible_maddrs()
        expiration = apiary.get_dht_time() + 60
        assert root.store("key0", {"index": 0, "tuple": (0, "x")}, expiration)
        reports = run_in_processes(store_and_report, [(peers, i, expiration) for i in range(1, 5)])
        ids = {r[0] for r in reports}
        assert len(ids) == 4 and str(root.peer_id) not in ids
        for _, seen in reports:
            assert seen == {"index": 0, "tuple": (0, "x")}  # a tuple stays a tuple

        # Every peer's own key, from the root.
        for i in range(1, 5):
            found = root.get(f"key{i}", latest=True)
            assert found is not None
            assert found.value == {"index": i, "tuple": (i, "x")}
            assert found.expiration_time == pytest.approx(expiration)
            value, exp = found  # unpacks like a pair
            assert value == found.value and exp == found.expiration_time
        assert root.get("missing key") is None

        # Subkeys stored by different peers merge into one dictionary.
        merged = root.get("shared", latest=True)
        assert merged is not None
        assert sorted(merged.value) == [1, 2, 3, 4]
        assert merged.value[3].value == "value of 3"

        # A later expiration overwrites; an earlier one does not.
        assert root.store("key1", 123, expiration + 10)
        assert not root.store("key1", 456, expiration + 5)
        assert root.get("key1", latest=True).value == 123

        # Futures.
        future = root.get("key2", latest=True, return_future=True)
        assert future.result(timeout=30).value["index"] == 2
        assert future.done()
        pending = root.get("key3", return_future=True)
        if pending.cancel():
            assert pending.cancelled()
            with pytest.raises(concurrent.futures.CancelledError):
                pending.result()


def test_encrypted_by_default_and_insecure_only_with_insecure_peers():
    expiration = apiary.get_dht_time() + 60
    for insecure in (False, True):
        with apiary.DHT(insecure=insecure) as root:
            assert root.store("root", f"insecure={insecure}", expiration)
            peers = root.get_visible_maddrs()
            same, other = run_in_processes(join_with, [(peers, insecure, expiration), (peers, not insecure, expiration)])
            assert same == ("joined", f"insecure={insecure}")
            assert root.get("joined", latest=True).value == insecure
            # A peer of the other kind is refused at once, saying why.
            assert other[0] == "refused"
            assert "--insecure" in other[1]
    with apiary.DHT(insecure=True):
        with pytest.raises(ValueError, match="insecure="):
            apiary.DHT()  # same listen address, same transport: it cannot be both


def test_auto_relay_keeps_a_reachable_node_direct_and_relay_service_is_one_per_transport():
    # Behind NAT a node with use_auto_relay is reached through a relay (the netns tests,
    # tests/integration/nat_relay_test.cpp); a node its initial peer can call back stays at
    # its own address.
    expiration = apiary.get_dht_time() + 60
    with apiary.DHT(relay_service=True) as relay:
        assert relay.store("root", "up", expiration)
        with pytest.raises(ValueError, match="relay_service="):
            apiary.DHT()  # same listen address, same transport: it cannot both serve and not
        peers = relay.get_visible_maddrs()
        joined = run_in_processes(join_with, [(peers, False, expiration)])[0]
        assert joined == ("joined", "up")
    with apiary.DHT() as root:
        with apiary.DHT(initial_peers=root.get_visible_maddrs(), use_auto_relay=True, use_relay=True) as node:
            (addr,) = node.get_visible_maddrs()
            assert "/p2p-circuit/" not in addr
            assert node.get("missing") is None


def test_an_authority_admits_its_members_only():
    # hivemind's authorizer=, on every call: members of one authority store and get
    # together; a node without its tokens is refused by every peer, saying why.
    expiration = apiary.get_dht_time() + 60
    with tempfile.TemporaryDirectory() as tmp:
        authority = os.path.join(tmp, "authority.key")
        with apiary.DHT(identity_path=authority):  # a missing identity file gets a fresh key
            pass
        with apiary.DHT(authority_path=authority) as root:
            assert root.store("members", "only", expiration)
            peers = root.get_visible_maddrs()
            member, stranger = run_in_processes(join_with_authority,
                                                [(peers, authority, expiration), (peers, None, expiration)])
            assert member == ("joined", "only")
            assert root.get("joined", latest=True).value is True
            assert stranger[0] == "refused", stranger
            assert "access token" in stranger[1]
        with pytest.raises(LookupError):
            apiary.DHT(authority_path=os.path.join(tmp, "missing.key"))


def test_an_initial_peer_dialled_under_another_peer_id_is_refused_naming_both():
    # A stale address (another node listens there now) or an impostor: the connection
    # proves the PeerID of the node that is there, and a call for another one never leaves.
    expiration = apiary.get_dht_time() + 60
    stale = apiary.PeerID(bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x20]) + os.urandom(32))
    with apiary.DHT() as root:
        root.store("root", "here", expiration)
        real = root.get_visible_maddrs()[0]
        dialled = real.replace(str(root.peer_id), str(stale))
        (refused, right) = run_in_processes(join_with, [([dialled], False, expiration), ([real], False, expiration)])
        assert refused[0] == "refused", refused
        # The root is one of the nodes behind its process's gateway: proven beside it.
        assert f"dialled as PeerID {stale}, but the peer there proved PeerID" in refused[1]
        assert str(root.peer_id) in refused[1] and "stale" in refused[1]
        assert right == ("joined", "here")


def test_keys_of_every_kind_and_their_bytes():
    # tuples are ext 0x40 around the list of their items, as hivemind writes them
    assert MSGPackSerializer.dumps((1, 2)) == b"\xc7\x03\x40\x92\x01\x02"
    assert MSGPackSerializer.loads(MSGPackSerializer.dumps([1, (2, b"x")])) == [1, (2, b"x")]
    with apiary.DHT() as dht:
        t = apiary.get_dht_time() + 30
        for key in ["text", b"raw bytes", 7, (1, "a"), None, 1.5]:
            assert dht.store(key, [key], t), key
            assert dht.get(key).value == [key], key


def test_visible_maddrs_and_peer_id():
    with apiary.DHT() as dht:
        maddrs = dht.get_visible_maddrs()
        assert maddrs and all(m.startswith("/ip4/127.0.0.1/") for m in maddrs)
        assert all(m.endswith(f"/p2p/{dht.peer_id}") for m in maddrs)
        pid = dht.peer_id
        assert apiary.PeerID.from_base58(str(pid)) == pid
        assert apiary.PeerID(pid.to_bytes()) == pid
        assert apiary.PeerID.from_multiaddr(maddrs[0]) == pid
        assert hash(pid) == hash(apiary.PeerID(pid.to_bytes()))


def test_identity_file_keeps_the_peer_id():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "node.key")
        with apiary.DHT(identity_path=path) as first:
            pid = first.peer_id
        with apiary.DHT(identity_path=path) as second:
            assert second.peer_id == pid


def test_bad_input_raises_clear_errors():
    with pytest.raises(TypeError):
        apiary.DHT(initial_peers="/ip4/127.0.0.1/tcp/1")  # one str, not a list
    with pytest.raises(ValueError):
        apiary.PeerID(b"not a peer id")
    with apiary.DHT() as dht:
        t = apiary.get_dht_time() + 30
        with pytest.raises(TypeError):
            dht.store("k", object(), t)
        with pytest.raises(TypeError):
            dht.store("k", {1, 2}, t)  # a set is not msgpack
        assert dht.store("ok", 1, t)
    with pytest.raises(RuntimeError, match="shut down"):
        dht.get("ok")
    with pytest.raises(RuntimeError, match="shut down"):
        dht.store("ok", 2, t)
    dht.shutdown()  # idempotent


def test_dead_initial_peers_fail_the_start():
    with apiary.DHT() as probe:
        dead = probe.get_visible_maddrs()[0]
    with pytest.raises((ConnectionError, TimeoutError)):
        apiary.DHT(initial_peers=[dead])
    with pytest.raises(ValueError):
        apiary.DHT(initial_peers=["not a multiaddr"])


def test_shutdown_from_another_thread_returns():
    # The process's runtime goes with its last DHT: stopping it from a thread other than
    # the one that started it must finish (it once waited forever in the actor system's
    # destructor). A process of its own, so that no other test's DHT shares the runtime.
    import subprocess
    import sys
    code = (
        "import threading, apiary\n"
        "d = apiary.DHT(start=True)\n"
        "t = threading.Thread(target=d.shutdown)\n"
        "t.start()\n"
        "t.join(30)\n"
        "print('alive' if t.is_alive() else 'joined', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "joined", done.stdout + done.stderr
    assert done.returncode == 0, done.stderr
