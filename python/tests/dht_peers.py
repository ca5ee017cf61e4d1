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


def sign_in_process(validator, record):
    """Signs `record` with a validator that came through pickle (hivemind's
    test_signing_in_different_process)."""
    return validator.sign_value(record)


def store_owned_and_forged(initial_peers, root_marker, expiration, with_validators):
    """A peer in client mode (so the root holds the only replicas) that stores an entry it
    owns, tries to write the root's entry, and stores values the schema forbids."""
    from apiary.dht.crypto import Ed25519SignatureValidator
    from apiary.dht.schema import BytesWithPublicKey, SchemaValidator
    from typing import Dict

    validators = []
    own_marker = b""
    if with_validators:
        signer = Ed25519SignatureValidator()
        own_marker = signer.local_public_key
        schema = SchemaValidator({"counts": Dict[BytesWithPublicKey, int], "name": str}, allow_extra_keys=True)
        validators = [signer, schema]
    with apiary.DHT(initial_peers=initial_peers, client_mode=True, record_validators=validators) as dht:
        out = {
            "own": dht.store("counts", 7, expiration, subkey=own_marker) if own_marker else None,
            "forged": dht.store("counts", 666, expiration, subkey=root_marker),
            "bad_type": dht.store("counts", "not an int", expiration, subkey=own_marker or b"x"),
            "bad_name": dht.store("name", b"bytes, not str", expiration),
            "good_name": dht.store("name", "peer", expiration + (1 if with_validators else 2)),  # each newer
            "counts": None,
        }
        found = dht.get("counts", latest=True) if with_validators else None  # signed values need a validator
        if found is not None:
            out["counts"] = {bytes(k): v.value for k, v in found.value.items()}
        return out


def join_with_authority(initial_peers, authority_path, expiration):
    """Joins through `initial_peers` as a member of `authority_path`'s swarm (None: as a
    stranger); returns ("joined", value of "members" seen) or ("refused", the error)."""
    try:
        dht = apiary.DHT(initial_peers=initial_peers, authority_path=authority_path)
    except (ConnectionError, TimeoutError, PermissionError) as e:
        return "refused", f"{type(e).__name__}: {e}"
    with dht:
        assert dht.store("joined", True, expiration)
        got = dht.get("members", latest=True)
        return "joined", None if got is None else got.value


def join_with(initial_peers, insecure, expiration):
    """Joins through `initial_peers` with or without encryption; returns what happened:
    ("joined", value of "root" seen) or ("refused", the error's text)."""
    try:
        dht = apiary.DHT(initial_peers=initial_peers, insecure=insecure)
    except (ConnectionError, TimeoutError) as e:
        return "refused", str(e)
    with dht:
        assert dht.store("joined", insecure, expiration)
        got = dht.get("root", latest=True)
        return "joined", None if got is None else got.value
