"""Record validators from Python (hivemind's test_dht_crypto.py, test_dht_schema.py and
test_dht_validation.py): ownership signatures with RSA and Ed25519 keys, schemas from
pydantic models and from mappings, composites, and nodes in separate processes that
reject forged and mistyped records."""
import dataclasses
import hashlib
import pickle
from typing import Dict, Optional

import pytest

import apiary
from apiary.dht.crypto import Ed25519PrivateKey, Ed25519SignatureValidator, RSAPrivateKey, RSASignatureValidator
from apiary.dht.schema import BytesWithPublicKey, SchemaValidator, conint
from apiary.dht.validation import CompositeValidator, DHTRecord
from apiary.serializer import MSGPackSerializer
from dht_peers import sign_in_process, store_owned_and_forged
from peers import run_in_processes

SIGNERS = [(RSASignatureValidator, RSAPrivateKey), (Ed25519SignatureValidator, Ed25519PrivateKey)]


def _signature_of(value: bytes) -> bytes:
    start = value.index(b"[signature:")
    return value[start:value.index(b"]", start) + 1]


@pytest.mark.parametrize("validator_class,key_class", SIGNERS)
def test_signature_validator(validator_class, key_class):
    receiver = validator_class()
    sender = validator_class(key_class())
    other = validator_class(key_class())
    plain = DHTRecord(key=b"key", subkey=b"subkey", value=b"value", expiration_time=apiary.get_dht_time() + 10)
    assert receiver.validate(plain)  # not protected: passes unsigned
    assert sender.sign_value(plain) == plain.value

    for record in [dataclasses.replace(plain, key=plain.key + sender.local_public_key),
                   dataclasses.replace(plain, subkey=plain.subkey + sender.local_public_key)]:
        signed = dataclasses.replace(record, value=sender.sign_value(record))
        assert signed.value.startswith(record.value) and b"[signature:" in signed.value
        assert receiver.validate(signed)
        assert receiver.strip_value(signed) == record.value
        assert not receiver.validate(record)  # no signature
        assert not receiver.validate(dataclasses.replace(record, value=record.value + b"[signature:INVALID_BYTES]"))
        # two signatures, one of them valid
        assert not receiver.validate(dataclasses.replace(signed, value=signed.value + _signature_of(signed.value)))
        # a valid signature by someone who does not own the record
        theirs = dataclasses.replace(record, key=record.key.replace(sender.local_public_key, other.local_public_key),
                                     subkey=record.subkey.replace(sender.local_public_key, other.local_public_key))
        forged = record.value + _signature_of(other.sign_value(theirs))
        assert not receiver.validate(dataclasses.replace(record, value=forged))
        # the signature covers the expiration too
        assert not receiver.validate(dataclasses.replace(signed, expiration_time=signed.expiration_time + 1))


def test_rsa_and_ed25519_owners_check_each_other():
    rsa, ed = RSASignatureValidator(RSAPrivateKey()), Ed25519SignatureValidator(Ed25519PrivateKey())
    assert rsa.local_public_key.startswith(b"[owner:ssh-rsa AAAA")  # as hivemind writes its owners
    for signer, checker in [(rsa, ed), (ed, rsa)]:
        record = DHTRecord(b"k" * 20, MSGPackSerializer.dumps(signer.local_public_key), MSGPackSerializer.dumps(1), 1e9)
        assert checker.validate(dataclasses.replace(record, value=signer.sign_value(record)))
    assert rsa.priority == ed.priority == 10


@pytest.mark.parametrize("validator_class,key_class", SIGNERS)
def test_process_wide_key_and_pickling(validator_class, key_class):
    assert validator_class().local_public_key == validator_class().local_public_key
    explicit = validator_class(key_class())
    assert explicit.local_public_key != validator_class().local_public_key
    restored = pickle.loads(pickle.dumps(explicit))
    assert restored.local_public_key == explicit.local_public_key
    # A copy in another process signs as the original.
    record = DHTRecord(b"key", b"sub" + explicit.local_public_key, b"value", apiary.get_dht_time() + 10)
    [signed_value] = run_in_processes(sign_in_process, [(explicit, record)])
    assert validator_class().validate(dataclasses.replace(record, value=signed_value))
    with pytest.raises(ValueError):
        key_class(b"not a key")
    with pytest.raises(TypeError):
        validator_class(object())


def _record(validator, field, value, subkey=None, prefix=None):
    """The record a node checks when `field` (a str key) is stored: the key's id is the
    SHA1 of its msgpack bytes."""
    key = f"{prefix}_{field}" if prefix else field
    key_id = hashlib.sha1(MSGPackSerializer.dumps(key)).digest()
    packed_subkey = b"\xc0" if subkey is None else MSGPackSerializer.dumps(subkey)
    return DHTRecord(key_id, packed_subkey, MSGPackSerializer.dumps(value), 1e9)


def _schema(kind):
    if kind == "mapping":
        return {"experiment_name": bytes, "n_batches": Dict[bytes, conint(ge=0, strict=True)],
                "signed_data": Dict[BytesWithPublicKey, bytes]}
    pydantic = pytest.importorskip("pydantic")

    class SampleSchema(pydantic.BaseModel):
        experiment_name: pydantic.StrictBytes
        n_batches: Dict[bytes, pydantic.conint(ge=0, strict=True)]
        signed_data: Dict[BytesWithPublicKey, bytes]

    return SampleSchema


@pytest.mark.parametrize("kind", ["mapping", "pydantic"])
def test_schema_types(kind):
    validator = SchemaValidator(_schema(kind), allow_extra_keys=False)
    ok = lambda *a, **k: validator.validate(_record(validator, *a, **k))  # noqa: E731
    assert ok("experiment_name", b"foo_bar")
    assert not ok("experiment_name", "a str")
    assert not ok("experiment_name", 777)
    assert not ok("experiment_name", {b"a": b"b"})  # a dict is not a regular value
    assert ok("n_batches", 777, subkey=b"uid1")
    assert not ok("n_batches", -1, subkey=b"uid1")
    assert not ok("n_batches", 1.5, subkey=b"uid1")
    assert not ok("n_batches", True, subkey=b"uid1")
    assert not ok("n_batches", 777, subkey="str subkey")
    assert not ok("n_batches", 777)  # a dictionary field needs a subkey
    owner = Ed25519SignatureValidator().local_public_key
    assert ok("signed_data", b"data", subkey=b"uid" + owner)
    assert not ok("signed_data", b"data", subkey=b"uid without an owner")
    assert not ok("unknown_key", b"anything")  # allow_extra_keys=False
    assert SchemaValidator(_schema(kind)).validate(_record(validator, "unknown_key", b"anything"))


def test_schema_prefix_merging_and_refusals():
    prefixed = SchemaValidator({"field_a": bytes}, allow_extra_keys=False, prefix="run")
    assert prefixed.validate(_record(prefixed, "field_a", b"x", prefix="run"))
    assert not prefixed.validate(_record(prefixed, "field_a", b"x"))  # not under the prefix
    other = SchemaValidator({"field_b": int}, allow_extra_keys=True)
    assert prefixed.merge_with(other)  # merged: any schema may accept, extra keys allowed
    assert prefixed.validate(_record(prefixed, "field_b", 5))
    assert prefixed.validate(_record(prefixed, "field_a", b"x", prefix="run"))
    assert not prefixed.validate(_record(prefixed, "field_b", "five"))
    assert prefixed.validate(_record(prefixed, "unknown", 1))
    restored = pickle.loads(pickle.dumps(prefixed))
    assert restored.validate(_record(prefixed, "field_b", 5)) and not restored.validate(_record(prefixed, "field_b", "x"))
    assert not prefixed.merge_with(Ed25519SignatureValidator())
    with pytest.raises(ValueError, match="Optional|str, int"):
        SchemaValidator({"maybe": Dict[bytes, "list"]})
    with pytest.raises(ValueError):
        SchemaValidator({})
    with pytest.raises(TypeError):
        SchemaValidator(42)


def test_composite_validator():
    signer = Ed25519SignatureValidator()
    composite = CompositeValidator([SchemaValidator({"field_a": bytes}, allow_extra_keys=False),
                                    signer, SchemaValidator({"field_b": Dict[BytesWithPublicKey, bytes]}, allow_extra_keys=False),
                                    Ed25519SignatureValidator(Ed25519PrivateKey())])
    assert [v.priority for v in composite.validators] == [10, 0]  # merged into one of each, sorted
    record = _record(signer, "field_b", b"value", subkey=b"sub" + signer.local_public_key)
    signed = dataclasses.replace(record, value=composite.sign_value(record))
    assert signed.value.count(b"[signature:") == 1
    assert composite.validate(signed)
    assert composite.strip_value(signed) == record.value
    assert not composite.validate(record)
    assert not composite.validate(_record(signer, "unknown", b"value"))
    with pytest.raises(TypeError):
        CompositeValidator([object()])


def test_nodes_reject_forged_and_mistyped_records():
    signer = Ed25519SignatureValidator(Ed25519PrivateKey())
    schema = SchemaValidator({"counts": Dict[BytesWithPublicKey, int], "name": str})
    expiration = apiary.get_dht_time() + 60
    with apiary.DHT(record_validators=[signer, schema]) as root:
        assert root.store("counts", 1, expiration, subkey=signer.local_public_key)
        peers = root.get_visible_maddrs()
        # One after the other: each stores a newer "name" than the one before.
        [guarded] = run_in_processes(store_owned_and_forged, [(peers, signer.local_public_key, expiration, True)])
        [bare] = run_in_processes(store_owned_and_forged, [(peers, signer.local_public_key, expiration, False)])
        for report in (guarded, bare):  # the root refuses what its validators refuse
            assert report["forged"] is False
            assert report["bad_type"] is False
            assert report["bad_name"] is False
            assert report["good_name"] is True
        assert guarded["own"] is True
        peer_marker = (set(guarded["counts"]) - {signer.local_public_key}).pop()
        counts = root.get("counts", latest=True).value
        assert {bytes(k): v.value for k, v in counts.items()} == {signer.local_public_key: 1, peer_marker: 7}
        assert guarded["counts"] == {signer.local_public_key: 1, peer_marker: 7}  # values come back stripped
        assert root.get("name", latest=True).value == "peer"


def test_add_validators_to_a_running_node():
    expiration = apiary.get_dht_time() + 60
    with apiary.DHT() as node:
        assert node.store("field_a", 123, expiration)  # no validators yet
        node.add_validators([SchemaValidator({"field_a": bytes}, allow_extra_keys=False)])
        assert not node.store("field_a", 456, expiration + 1)
        assert node.store("field_a", b"bytes", expiration + 2)
        assert not node.store("unknown", b"x", expiration)
        node.add_validators([SchemaValidator({"unknown": bytes})])  # merged: extra keys allowed now
        assert node.store("unknown", b"x", expiration)
        with pytest.raises(TypeError):
            node.add_validators([object()])
    with pytest.raises(RuntimeError, match="shut down"):
        node.add_validators([])
    with pytest.raises(TypeError):
        apiary.DHT(record_validators=["not a validator"])


def test_hivemind_progress_schema_with_nested_optional_records():
    pydantic = pytest.importorskip("pydantic")

    class LocalTrainingProgress(pydantic.BaseModel):
        peer_id: bytes
        epoch: pydantic.conint(ge=0, strict=True)
        samples_accumulated: pydantic.conint(ge=0, strict=True)
        samples_per_second: pydantic.confloat(ge=0.0, strict=True)
        time: pydantic.StrictFloat
        client_mode: pydantic.StrictBool

    class TrainingProgressSchema(pydantic.BaseModel):
        progress: Dict[BytesWithPublicKey, Optional[LocalTrainingProgress]]

    validator = SchemaValidator(TrainingProgressSchema, prefix="run", allow_extra_keys=False)
    owner = Ed25519SignatureValidator().local_public_key
    ok = lambda value, subkey=owner: validator.validate(_record(validator, "progress", value, subkey, "run"))  # noqa: E731
    good = dict(peer_id=b"id", epoch=3, samples_accumulated=10, samples_per_second=2.5, time=1.7e9, client_mode=False)
    assert ok(good)
    assert ok(LocalTrainingProgress(**good).dict())  # what hivemind's tracker stores
    assert ok(None)  # a peer that left
    assert not ok(good, subkey=b"no owner")
    assert not ok(dict(good, epoch=-1))
    assert not ok(dict(good, samples_per_second=3))  # an int is not a float
    assert not ok(dict(good, samples_per_second=-0.5))
    assert not ok(dict(good, client_mode=1))
    assert not ok(dict(good, extra=1))
    assert not ok({k: v for k, v in good.items() if k != "time"})
    assert not ok([1, 2])
