"""Record validators (hivemind.dht.validation): what a DHT node checks on every record
it stores or finds, signs on every record it stores, and strips before returning a value.

apiary's validators run in C++ inside the node (no Python on the node's threads); the
classes here configure them and can be called directly on a DHTRecord.
"""
import dataclasses
from typing import Any, Iterable, List

from .. import _apiary


@dataclasses.dataclass(init=True, repr=True, frozen=True)
class DHTRecord:
    """One stored item as validators see it: the key's id bytes (20), the msgpack subkey
    (``b"\\xc0"`` for a regular value), the msgpack value, the expiration (DHT time)."""

    key: bytes
    subkey: bytes
    value: bytes
    expiration_time: float


class RecordValidatorBase:
    """A validator backed by the C++ one a DHT node runs (apiary's validators are
    RSASignatureValidator, Ed25519SignatureValidator and SchemaValidator)."""

    _native: Any = None

    def _args(self, record: DHTRecord) -> tuple:
        if not isinstance(record, DHTRecord):
            raise TypeError(f"expected a DHTRecord, got {type(record).__name__}")
        return bytes(record.key), bytes(record.subkey), bytes(record.value), float(record.expiration_time)

    def validate(self, record: DHTRecord) -> bool:
        """True iff the record may be stored or returned."""
        return self._native.validate(*self._args(record))

    def sign_value(self, record: DHTRecord) -> bytes:
        """The value as it is stored: with this validator's markers (a signature) if any."""
        return self._native.sign_value(*self._args(record))

    def strip_value(self, record: DHTRecord) -> bytes:
        """The value without this validator's markers, as the application stored it."""
        return self._native.strip_value(*self._args(record))

    @property
    def priority(self) -> int:
        """Signing runs in increasing priority, validating and stripping in decreasing."""
        return self._native.priority

    def merge_with(self, other: "RecordValidatorBase") -> bool:
        """Absorbs ``other`` when both are of a kind that merges (ownership validators
        merge into one, schema validators into one accepting any of their schemas)."""
        if not isinstance(other, RecordValidatorBase) or other._native is None:
            return False
        merged = _apiary.merge_validators(self._native, other._native)
        if merged is None:
            return False
        self._native = merged
        self._merged(other)
        return True

    def _merged(self, other: "RecordValidatorBase") -> None:
        """Keeps what pickling needs of a merge (subclasses that pickle override it)."""


class CompositeValidator(RecordValidatorBase):
    """Several validators acting as one (merged where they merge, in priority order)."""

    def __init__(self, validators: Iterable[RecordValidatorBase] = ()):
        self._validators: List[RecordValidatorBase] = []
        self.extend(validators)

    def extend(self, validators: Iterable[RecordValidatorBase]) -> None:
        for validator in validators:
            if not isinstance(validator, RecordValidatorBase) or isinstance(validator, CompositeValidator):
                raise TypeError(
                    "expected apiary validators (RSASignatureValidator, Ed25519SignatureValidator, "
                    f"SchemaValidator), got {type(validator).__name__}"
                )
            if not any(held.merge_with(validator) for held in self._validators):
                self._validators.append(validator)
        self._validators.sort(key=lambda v: -v.priority)

    @property
    def validators(self) -> List[RecordValidatorBase]:
        return list(self._validators)

    def validate(self, record: DHTRecord) -> bool:
        for validator in self._validators:  # highest priority first, each on the stripped value
            if not validator.validate(record):
                return False
            record = dataclasses.replace(record, value=validator.strip_value(record))
        return True

    def sign_value(self, record: DHTRecord) -> bytes:
        for validator in reversed(self._validators):  # lowest priority first
            record = dataclasses.replace(record, value=validator.sign_value(record))
        return record.value

    def strip_value(self, record: DHTRecord) -> bytes:
        for validator in self._validators:
            record = dataclasses.replace(record, value=validator.strip_value(record))
        return record.value

    @property
    def priority(self) -> int:
        return max((v.priority for v in self._validators), default=0)

    def merge_with(self, other: RecordValidatorBase) -> bool:
        return False


def native_validators(validators: Iterable[Any]) -> list:
    """The C++ validators behind ``validators``, for a DHT node (composites flattened)."""
    out = []
    for validator in validators:
        if isinstance(validator, CompositeValidator):
            out.extend(native_validators(validator.validators))
        elif isinstance(validator, RecordValidatorBase) and validator._native is not None:
            out.append(validator._native)
        else:
            raise TypeError(
                "apiary runs record validators in C++; expected RSASignatureValidator, "
                f"Ed25519SignatureValidator or SchemaValidator from apiary.dht, got {type(validator).__name__}"
            )
    return out
