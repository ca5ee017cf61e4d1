"""Schema checks on DHT records (hivemind.dht.schema): a schema names fields (each a DHT
key, ``<prefix>_<field>`` with a prefix) and the type of their values and subkeys.

A schema is a pydantic model (v1, as hivemind's) or a plain mapping ``{field: type}``;
types are checked strictly, as hivemind asks of its schemas (an int is not a float, a str
is not bytes, nothing is converted). The field types apiary checks (in C++, inside the
node): ``bytes``, ``str``, ``int``, ``float``, ``bool``, a non-negative int or float
(``conint(ge=0)``, ``confloat(ge=0)``), ``BytesWithPublicKey`` (bytes holding an owner
marker), a nested model of those (a record: a msgpack map of exactly its fields, as
hivemind's LocalTrainingProgress), ``Optional[...]`` of any of them, and ``Dict[K, V]``
of those. Any other type is refused when the validator is made.
"""
import collections.abc
import typing
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import _apiary
from .validation import RecordValidatorBase

# Type codes of the C++ schema validator (core::dht::schema_type).
_BYTES, _STR, _INT, _NONNEGATIVE_INT, _FLOAT, _BOOL, _BYTES_WITH_OWNER, _NONNEGATIVE_FLOAT, _RECORD = range(9)
_SUPPORTED = ("bytes, str, int, conint(ge=0), float, confloat(ge=0), bool, BytesWithPublicKey, nested models "
              "of those, Optional[...] and Dict[K, V] of them")


class BytesWithPublicKey(bytes):
    """Bytes that hold an ``[owner:...]`` marker: the subkey type of owner-protected
    dictionary entries (hivemind's BytesWithPublicKey)."""


def conint(*, ge: Optional[int] = None, strict: bool = True, **constraints: Any) -> type:
    """An int type; ``conint(ge=0)`` is the non-negative int apiary's schemas check."""
    if constraints or ge not in (None, 0):
        raise ValueError(f"apiary's schemas check int and conint(ge=0); got conint(ge={ge}, {constraints})")
    return type("ConstrainedIntValue", (int,), {"ge": ge, "strict": strict})


def confloat(*, ge: Optional[float] = None, strict: bool = True, **constraints: Any) -> type:
    """A float type; ``confloat(ge=0)`` is the non-negative float apiary's schemas check."""
    if constraints or ge not in (None, 0):
        raise ValueError(f"apiary's schemas check float and confloat(ge=0); got confloat(ge={ge}, {constraints})")
    return type("ConstrainedFloatValue", (float,), {"ge": ge, "strict": strict})


def _scalar_code(annotation: Any, where: str) -> int:
    if isinstance(annotation, type):
        if issubclass(annotation, bytes):
            regex = getattr(annotation, "regex", None)
            pattern = getattr(regex, "pattern", regex)
            if issubclass(annotation, BytesWithPublicKey) or annotation.__name__ == "BytesWithPublicKey" or (
                pattern is not None and b"owner" in (pattern if isinstance(pattern, bytes) else str(pattern).encode())
            ):
                return _BYTES_WITH_OWNER
            return _BYTES
        if issubclass(annotation, str):
            return _STR
        if issubclass(annotation, bool) or annotation.__name__ == "StrictBool":  # pydantic v1's is an int class
            return _BOOL
        if issubclass(annotation, int):
            ge, gt = getattr(annotation, "ge", None), getattr(annotation, "gt", None)
            others = [name for name in ("le", "lt", "multiple_of") if getattr(annotation, name, None) is not None]
            if others or (ge is not None and ge != 0) or (gt is not None and gt != -1):
                raise ValueError(f"apiary's schemas check int and conint(ge=0); {where} is constrained by {others or [ge, gt]}")
            return _NONNEGATIVE_INT if (ge == 0 or gt == -1) else _INT
        if issubclass(annotation, float):
            ge, gt = getattr(annotation, "ge", None), getattr(annotation, "gt", None)
            others = [name for name in ("le", "lt", "multiple_of") if getattr(annotation, name, None) is not None]
            if others or (ge is not None and ge != 0) or gt is not None:
                raise ValueError(f"apiary's schemas check float and confloat(ge=0); {where} is constrained by {others or [ge, gt]}")
            return _NONNEGATIVE_FLOAT if ge == 0 else _FLOAT
    raise ValueError(f"apiary's schemas check {_SUPPORTED}; {where} is {annotation!r}")


def _optional(annotation: Any) -> Tuple[Any, bool]:
    """(X, True) for Optional[X], else (annotation, False)."""
    if typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _annotations_of(model: Any) -> Optional[Dict[str, Tuple[Any, bool]]]:
    """{field: (type, nullable)} of a model class (pydantic v1 or annotated), else None."""
    if not isinstance(model, type) or issubclass(model, (bytes, str, int, float)):
        return None
    fields = getattr(model, "__fields__", None)  # pydantic v1: the declared outer types
    if isinstance(fields, Mapping) and fields and all(hasattr(f, "outer_type_") for f in fields.values()):
        return {name: (field.outer_type_, bool(getattr(field, "allow_none", False))) for name, field in fields.items()}
    hints = typing.get_type_hints(model)
    return {name: _optional(annotation) for name, annotation in hints.items()} if hints else None


def _value_spec(annotation: Any, where: str) -> Tuple[int, bool, List[Tuple[str, int, bool]]]:
    """(type code, nullable, record fields) of a value annotation."""
    annotation, nullable = _optional(annotation)
    members = _annotations_of(annotation)
    if members is None:
        return _scalar_code(annotation, where), nullable, []
    record = []
    for member, (member_type, member_nullable) in members.items():
        inner, inner_nullable = _optional(member_type)
        if _annotations_of(inner) is not None:
            raise ValueError(f"apiary's schemas nest models one level; {member!r} of {where} is a model too")
        record.append((str(member), _scalar_code(inner, f"{member!r} of {where}"), member_nullable or inner_nullable))
    return _RECORD, nullable, record


def _field_spec(name: str, annotation: Any, nullable: bool = False) -> tuple:
    origin = typing.get_origin(annotation)
    if origin in (dict, collections.abc.Mapping):
        args = typing.get_args(annotation)
        if len(args) != 2:
            raise ValueError(f"expected Dict[K, V] for field {name!r}, got {annotation!r}")
        code, value_nullable, record = _value_spec(args[1], f"the values of {name!r}")
        return name, code, _scalar_code(args[0], f"the subkeys of {name!r}"), value_nullable, record
    code, value_nullable, record = _value_spec(annotation, f"field {name!r}")
    return name, code, None, nullable or value_nullable, record


def _fields_of(schema: Any) -> List[tuple]:
    if isinstance(schema, Mapping):
        annotations = {name: _optional(annotation) for name, annotation in schema.items()}
    elif isinstance(schema, type):
        annotations = _annotations_of(schema) or {}
    else:
        raise TypeError(f"expected a pydantic model class or a mapping of field types, got {type(schema).__name__}")
    if not annotations:
        raise ValueError("expected a schema with at least one field")
    return [_field_spec(str(name), annotation, nullable) for name, (annotation, nullable) in annotations.items()]


class SchemaValidator(RecordValidatorBase):
    """Accepts records under the schema's keys only with values (and subkeys) of its
    types; other keys pass iff ``allow_extra_keys``. Priority 0: signatures are checked
    and stripped first. Merged schema validators accept a record any schema accepts."""

    def __init__(self, schema: Any, allow_extra_keys: bool = True, prefix: Optional[str] = None):
        fields = _fields_of(schema)
        self._schemas = [(fields, None if prefix is None else str(prefix))]
        self._allow_extra_keys = bool(allow_extra_keys)
        self._native = _apiary.schema_validator(fields, self._schemas[0][1], self._allow_extra_keys)

    def _merged(self, other: RecordValidatorBase) -> None:
        self._schemas.extend(getattr(other, "_schemas", []))
        self._allow_extra_keys = self._allow_extra_keys or getattr(other, "_allow_extra_keys", False)

    def __getstate__(self) -> dict:
        return {"schemas": self._schemas, "allow_extra_keys": self._allow_extra_keys}

    def __setstate__(self, state: dict) -> None:
        schemas = state["schemas"]
        self._schemas = [schemas[0]]
        self._allow_extra_keys = state["allow_extra_keys"]
        self._native = _apiary.schema_validator(schemas[0][0], schemas[0][1], self._allow_extra_keys)
        for fields, prefix in schemas[1:]:
            other = SchemaValidator.__new__(SchemaValidator)
            other._schemas, other._allow_extra_keys = [(fields, prefix)], self._allow_extra_keys
            other._native = _apiary.schema_validator(fields, prefix, self._allow_extra_keys)
            self.merge_with(other)
