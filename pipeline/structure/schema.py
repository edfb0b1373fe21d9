"""The job's schema: read it, check it, convert it for the wire.

This runs at job load, before any call is paid for. The user's schema must be valid JSON
Schema (draft 4, 6, 7, 2019-09 or 2020-12; 2020-12 when ``$schema`` is absent) with
``"type": "object"`` at the top. It is kept as is for validation (:mod:`.validate`) and
converted for ``responseJsonSchema`` or ``responseSchema`` by :mod:`.convert`, whose docstring
lists what is kept, converted, dropped and refused. Every refusal is a :class:`SchemaError`
naming the file, the JSON pointer and the keyword. What the API accepts:
``docs/wire-format.md`` "Schema fields".

The only IO of the package is :func:`load_schema` reading the schema file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson

from pipeline.structure.convert import _convert
from pipeline.structure.schema_error import SchemaError, _clip, _esc, _json_kind

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "PreparedSchema",
    "SchemaError",
    "WireField",
    "load_schema",
    "prepare_schema",
    "prepare_schema_file",
]

WireField = Literal["responseJsonSchema", "responseSchema"]
_WIRE_FIELDS: tuple[WireField, ...] = ("responseJsonSchema", "responseSchema")


def _require_object_root(schema: Any, source: str) -> None:
    if not isinstance(schema, dict):
        raise SchemaError(
            f'the schema must be a JSON object with "type": "object", got {_json_kind(schema)}',
            source=source,
        )
    if schema.get("type") != "object":
        got = orjson.dumps(schema["type"]).decode() if "type" in schema else "no type"
        raise SchemaError(
            'must be "object" at the top level (the structured output is one JSON object per'
            f" question), got {got}",
            source=source,
            pointer="",
            keyword="type",
        )


def load_schema(path: Path) -> dict[str, Any]:
    """Read and parse a JSON Schema file whose top level is ``"type": "object"``.

    Raises :class:`SchemaError` naming the file and saying why (unreadable, not JSON, not an
    object schema). Call :func:`prepare_schema` next (or :func:`prepare_schema_file`).
    """
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SchemaError(
            f"cannot read the schema file: {exc.strerror or exc}", source=source
        ) from None
    try:
        schema = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SchemaError(
            f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", source=source
        ) from None
    _require_object_root(schema, source)
    return cast(dict[str, Any], schema)


@dataclass(frozen=True, slots=True)
class PreparedSchema:
    """The user's schema (validated against) and what is sent for it."""

    validation_schema: dict[str, Any]  # the user's schema, untouched: used with jsonschema
    wire_field: WireField  # the generationConfig key
    wire_schema: dict[str, Any]  # the converted schema sent under wire_field
    validator: Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from jsonschema.validators import Draft202012Validator, validator_for

        cls = validator_for(self.validation_schema, default=Draft202012Validator)
        object.__setattr__(self, "validator", cls(self.validation_schema))


_UNKNOWN_DIALECT: Any = object()


def prepare_schema(
    schema: dict[str, Any],
    *,
    wire_field: str = "responseJsonSchema",
    source: str = "schema",
) -> PreparedSchema:
    """Check the user's schema and convert it for ``wire_field`` (see :mod:`.convert`).

    ``source`` names the schema in error messages (the file's path). Raises
    :class:`SchemaError` for an invalid JSON Schema, a top level that is not ``"type":
    "object"``, or a keyword the API cannot take (naming pointer and keyword).
    """
    if wire_field not in _WIRE_FIELDS:
        raise ValueError(f"wire_field must be one of {', '.join(_WIRE_FIELDS)}, got {wire_field!r}")
    from jsonschema import exceptions as js_exceptions
    from jsonschema.validators import Draft202012Validator, validator_for

    _require_object_root(schema, source)
    cls = validator_for(schema, default=_UNKNOWN_DIALECT)
    if cls is _UNKNOWN_DIALECT and "$schema" not in schema:
        cls = Draft202012Validator
    if cls is _UNKNOWN_DIALECT:
        raise SchemaError(
            f"unknown dialect {schema['$schema']!r}; use draft 4, 6, 7, 2019-09 or 2020-12"
            " (or leave $schema out for 2020-12)",
            source=source,
            pointer="",
            keyword="$schema",
        )
    try:
        cls.check_schema(schema)
    except js_exceptions.SchemaError as exc:
        pointer = "".join(f"/{_esc(str(p))}" for p in exc.path)
        raise SchemaError(
            f"not a valid JSON Schema ({cls.__name__.removesuffix('Validator')}):"
            f" {_clip(exc.message)}",
            source=source,
            pointer=pointer,
        ) from None
    wire = _convert(schema, openapi=wire_field == "responseSchema", source=source)
    return PreparedSchema(
        validation_schema=schema, wire_field=cast(WireField, wire_field), wire_schema=wire
    )


def prepare_schema_file(path: Path, *, wire_field: str = "responseJsonSchema") -> PreparedSchema:
    """:func:`load_schema` then :func:`prepare_schema`, errors naming the file."""
    return prepare_schema(load_schema(path), wire_field=wire_field, source=str(path))
