"""Schema checks on DHT records (hivemind.dht.schema): a schema names fields (each a DHT
key, ``<prefix>_<field>`` with a prefix) and the type of their values and subkeys.

A schema is a pydantic model (v1, as hivemind's) or a plain mapping ``{field: type}``;
types are checked strictly, as hivemind asks of its schemas (an int is not a float, a str
is not bytes, nothing is converted). The field types apiary checks (in C++, inside the
node): ``bytes``, ``str``, ``int``, ``float``, ``bool``, a non-negative int
(``conint(ge=0)``), ``BytesWithPublicKey`` (bytes holding an owner marker), and
``Dict[K, V]`` of those. Any other type is refused when the validator is made.
"""
import collections.abc
import typing
from typing import Any, List, Mapping, Optional, Tuple

from .. import _apiary
from .validation import RecordValidatorBase

# Type codes of the C++ schema validator (core::dht::schema_type).
_BYTES, _STR, _INT, _NONNEGATIVE_INT, _FLOAT, _BOOL, _BYTES_WITH_OWNER = range(7)


class BytesWithPublicKey(bytes):
    """Bytes that hold an ``[owner:...]`` marker: the subkey type of owner-protected
    dictionary entries (hivemind's BytesWithPublicKey)."""


def conint(*, ge: Optional[int] = None, strict: bool = True, **constraints: Any) -> type:
    """An int type; ``conint(ge=0)`` is the non-negative int apiary's schemas check."""
    if constraints or ge not in (None, 0):
        raise ValueError(f"apiary's schemas check int and conint(ge=0); got conint(ge={ge}, {constraints})")
    return type("ConstrainedIntValue", (int,), {"ge": ge, "strict": strict})


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
        if issubclass(annotation, bool):
            return _BOOL
        if issubclass(annotation, int):
            ge, gt = getattr(annotation, "ge", None), getattr(annotation, "gt", None)
            others = [name for name in ("le", "lt", "multiple_of") if getattr(annotation, name, None) is not None]
            if others or (ge is not None and ge != 0) or (gt is not None and gt != -1):
                raise ValueError(f"apiary's schemas check int and conint(ge=0); {where} is constrained by {others or [ge, gt]}")
            return _NONNEGATIVE_INT if (ge == 0 or gt == -1) else _INT
        if issubclass(annotation, float):
            return _FLOAT
    raise ValueError(
        f"apiary's schemas check bytes, str, int, conint(ge=0), float, bool, BytesWithPublicKey and "
        f"Dict[K, V] of them; {where} is {annotation!r}"
    )


def _field_spec(name: str, annotation: Any) -> Tuple[str, int, Optional[int]]:
    origin = typing.get_origin(annotation)
    if origin in (dict, collections.abc.Mapping):
        args = typing.get_args(annotation)
        if len(args) != 2:
            raise ValueError(f"expected Dict[K, V] for field {name!r}, got {annotation!r}")
        return name, _scalar_code(args[1], f"the values of {name!r}"), _scalar_code(args[0], f"the subkeys of {name!r}")
    return name, _scalar_code(annotation, f"field {name!r}"), None


def _fields_of(schema: Any) -> List[Tuple[str, int, Optional[int]]]:
    if isinstance(schema, Mapping):
        annotations = dict(schema)
    elif isinstance(schema, type):
        fields = getattr(schema, "__fields__", None)  # pydantic v1: the declared outer types
        if isinstance(fields, Mapping) and fields and all(hasattr(f, "outer_type_") for f in fields.values()):
            nullable = [name for name, field in fields.items() if getattr(field, "allow_none", False)]
            if nullable:
                raise ValueError(f"apiary's schemas check values that are not None; fields {nullable} are Optional")
            annotations = {name: field.outer_type_ for name, field in fields.items()}
        else:
            annotations = typing.get_type_hints(schema)
    else:
        raise TypeError(f"expected a pydantic model class or a mapping of field types, got {type(schema).__name__}")
    if not annotations:
        raise ValueError("expected a schema with at least one field")
    return [_field_spec(str(name), annotation) for name, annotation in annotations.items()]


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
