"""DHT peers for test_dht.py (module-level functions: they run in spawned processes)."""
import time

import apiary


def store_and_report(initial_peers, index, expiration):
    with apiary.DHT(initial_peers=initial_peers) as dht:
        assert dht.store(f"key{index}", {"index": index, "tuple": (index, "x")}, expiration)
        assert dht.store("shared", f"value of {index}", expiration, subkey=index)
        got = dht.get("key0", latest=True)
        time.sleep(0.5)
        return str(dht.peer_id), None if got is None else got.value
