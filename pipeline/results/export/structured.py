"""The typed shape of call 2's object, derived from the job's JSON Schema, and whether a stored
object fits it. Pure.

Parquet and Arrow give ``structured`` a real type (nested structs and lists) where the schema
says exactly one: an object with ``properties`` is a struct of them in their order, an array
with one ``items`` schema a list, ``string``/``integer``/``number``/``boolean`` (or an
``enum``/``const`` of one such type) a scalar; ``null`` beside one type (``["integer",
"null"]``, an ``anyOf`` with a ``{"type": "null"}`` branch) only makes it nullable, and local
``$ref``\\s are followed. Anything else (several types, a free-form object, a tuple, a
``$ref`` cycle, no type at all) has no one Arrow type: :func:`structured_shape` then returns
None and the exports fall back to JSON text, in a column named ``structured_json``.

A stored object need not fit the job's current schema (call 2's output failed validation, or
an earlier schema made it): :func:`fits` tells, strictly (no key the struct lacks, no bool for
a number, no fraction for an integer), so a typed column never drops or rounds a value: an
object that does not fit is written as JSON text beside it (``structured_json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.results.export.records import Field, FieldType, Kind, ListOf, Struct

__all__ = [
    "structured_shape",
]

_SCALARS: dict[str, Kind] = {
    "string": Kind.STRING,
    "integer": Kind.INT64,
    "number": Kind.FLOAT,
    "boolean": Kind.BOOLEAN,
}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_DEPTH = 32  # nesting followed before a schema counts as having no fixed shape


class _NoShape(Exception):
    """The schema (or a part of it) has no one Arrow type."""


def structured_shape(schema: Mapping[str, Any] | None) -> FieldType | None:
    """The type of ``structured`` under ``schema`` (the job's JSON Schema); None when it has
    none (no schema, or one that allows values of more than one shape)."""
    if schema is None:
        return None
    try:
        return _shape(schema, schema, depth=0)
    except _NoShape:
        return None


def _resolve(ref: Any, root: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        raise _NoShape  # remote, an $anchor, or not a pointer: not followed here
    node: Any = root
    for token in ref[2:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or token not in node:
            raise _NoShape
        node = node[token]
    if not isinstance(node, Mapping):
        raise _NoShape
    return node


def _without_null(schemas: list[Any]) -> list[Any]:
    return [s for s in schemas if not (isinstance(s, Mapping) and s.get("type") == "null")]


def _shape(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> FieldType:
    if depth > MAX_DEPTH:
        raise _NoShape
    if "$ref" in schema:
        return _shape(_resolve(schema["$ref"], root), root, depth + 1)
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            branches = _without_null(list(schema[keyword]))
            if len(branches) != 1 or not isinstance(branches[0], Mapping):
                raise _NoShape
            return _shape(branches[0], root, depth + 1)
    if "allOf" in schema or "prefixItems" in schema:
        raise _NoShape
    kind = _type_of(schema)
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            raise _NoShape  # a free-form object: its keys are not known
        return Struct(
            tuple(
                Field(name, _shape(_mapping(sub), root, depth + 1), "")
                for name, sub in properties.items()
            )
        )
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            raise _NoShape
        return ListOf(_shape(items, root, depth + 1), items_nullable=True)
    return _SCALARS[kind]


def _mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _NoShape
    return value


def _type_of(schema: Mapping[str, Any]) -> str:
    """The one JSON type ``schema`` allows besides null."""
    declared = schema.get("type")
    if declared is None and "properties" in schema:
        declared = "object"  # a value of another type would not fit: it stays JSON text
    elif declared is None and "items" in schema:
        declared = "array"
    if declared is None:
        values = schema.get("enum", [schema["const"]] if "const" in schema else None)
        if not values:
            raise _NoShape
        declared = sorted({_json_type(v) for v in values if v is not None})
    types = [declared] if isinstance(declared, str) else [t for t in declared if t != "null"]
    if types == ["integer", "number"]:
        types = ["number"]
    if len(types) != 1 or types[0] not in (*_SCALARS, "object", "array"):
        raise _NoShape
    return types[0]


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    raise _NoShape


def fits(value: Any, shape: FieldType) -> bool:
    """Whether ``value`` (a decoded JSON value) can be held by ``shape`` with nothing dropped
    or rounded; None fits anywhere (every level is nullable)."""
    if value is None:
        return True
    if isinstance(shape, Struct):
        if not isinstance(value, dict):
            return False
        types = {f.name: f.type for f in shape.fields}
        return all(k in types and fits(v, types[k]) for k, v in value.items())
    if isinstance(shape, ListOf):
        return isinstance(value, list) and all(fits(v, shape.item) for v in value)
    if shape is Kind.STRING:
        return isinstance(value, str)
    if shape is Kind.BOOLEAN:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if shape is Kind.INT64:
        if isinstance(value, float):
            return value.is_integer() and INT64_MIN <= value <= INT64_MAX
        return isinstance(value, int) and INT64_MIN <= value <= INT64_MAX
    if shape is Kind.FLOAT:
        return isinstance(value, int | float)
    return False
