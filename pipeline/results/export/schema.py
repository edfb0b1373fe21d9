"""The export's documented schema, derived from :data:`pipeline.results.export.records.RECORD`:
a JSON Schema for a JSONL record, and the CSV's columns as W3C CSV on the Web metadata
(https://www.w3.org/TR/tabular-metadata/). ``ground export --schema`` prints them. Pure.

The JSON Schema (draft 2020-12) is closed: every field is required (a missing value is
``null``), no other key is allowed, enums list their values where the set is closed. A
timestamp is a ``date-time`` string. ``structured`` is any JSON value; when the job has a
schema, it is embedded (``$defs``) and a record whose object was made by that very schema
(``schema_hash``) and passed it (``structured_valid``) must match it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pipeline.results.export.records import (
    CITATION,
    SOURCE,
    Field,
    FieldType,
    Kind,
    ListOf,
    Struct,
    record_fields,
)
from pipeline.results.export.writers import FORMULA_LEADS, LONG_KINDS

__all__ = [
    "csv_schema",
    "json_schema",
]

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
JOB_SCHEMA_ID = "urn:ground:job-schema"  # the embedded job schema's $id, unless it has one
CSVW_CONTEXT = "http://www.w3.org/ns/csvw"

_JSON_TYPES: dict[Kind, dict[str, Any]] = {
    Kind.STRING: {"type": "string"},
    Kind.TEXT: {"type": "string"},
    Kind.ENUM: {"type": "string"},
    Kind.BOOLEAN: {"type": "boolean"},
    Kind.INT32: {"type": "integer"},
    Kind.INT64: {"type": "integer"},
    Kind.FLOAT: {"type": "number"},
    Kind.TIMESTAMP: {"type": "string", "format": "date-time"},
    Kind.JSON: {},
    Kind.STRUCTURED: {},
}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if not schema:
        return schema  # any value, null included
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _type_schema(kind: FieldType, *, nullable: bool, values: tuple[str, ...] = ()) -> Any:
    if isinstance(kind, ListOf):
        schema: dict[str, Any] = {
            "type": "array",
            "items": _type_schema(kind.item, nullable=kind.items_nullable),
        }
    elif isinstance(kind, Struct):
        schema = _object_schema(kind.fields)
    elif values:
        schema = {"enum": list(values)}
    else:
        schema = dict(_JSON_TYPES[kind])
    return _nullable(schema) if nullable else schema


def _field_schema(field: Field) -> dict[str, Any]:
    schema = _type_schema(field.type, nullable=not field.required, values=field.values)
    return {"description": field.doc, **schema} if field.doc else schema


def _object_schema(fields: tuple[Field, ...]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {f.name: _field_schema(f) for f in fields},
        "required": [f.name for f in fields],
        "additionalProperties": False,
    }


def json_schema(
    job_schema: Mapping[str, Any] | None = None,
    *,
    schema_hash: str | None = None,
    versions: bool = False,
) -> dict[str, Any]:
    """The JSON Schema of one JSONL record (``versions``: with ``--all-versions``' fields).
    ``job_schema`` and its ``schema_hash``: the job's call-2 schema, embedded (see the module
    docstring)."""
    document: dict[str, Any] = {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "ground export record",
        "description": "One question, its answer, citations, sources and structured object"
        + (", at one stored answer version" if versions else ""),
        **_object_schema(record_fields(versions=versions)),
    }
    if job_schema is not None and schema_hash is not None:
        embedded = copy.deepcopy(dict(job_schema))
        embedded.setdefault("$id", JOB_SCHEMA_ID)
        document["$defs"] = {"job_schema": embedded}
        document["allOf"] = [
            {
                "if": {
                    "properties": {
                        "structured_valid": {"const": True},
                        "schema_hash": {"const": schema_hash},
                    },
                    "required": ["structured_valid", "schema_hash"],
                },
                "then": {"properties": {"structured": {"$ref": embedded["$id"]}}},
            }
        ]
    return document


_CSVW_TYPES: dict[Kind, Any] = {
    Kind.STRING: "string",
    Kind.TEXT: "string",
    Kind.ENUM: "string",
    Kind.BOOLEAN: {"base": "boolean", "format": "true|false"},
    Kind.INT32: "int",
    Kind.INT64: "long",
    Kind.FLOAT: "double",
    Kind.TIMESTAMP: "datetime",
    Kind.JSON: "json",
    Kind.STRUCTURED: "json",
}


def _csvw_column(field: Field) -> dict[str, Any]:
    kind = field.type
    column: dict[str, Any] = {
        "name": field.name,
        "titles": field.name,
        "datatype": _CSVW_TYPES[kind] if isinstance(kind, Kind) else "json",
        "required": field.required,
    }
    if field.doc:
        column["dc:description"] = field.doc
    return column


_ID = Field("id", Kind.STRING, "the question's id in the input", required=True)
_ORDINAL = Field("ordinal", Kind.INT32, "the citation's position in the record", required=True)


def csv_schema(long: str | None = None, *, versions: bool = False) -> dict[str, Any]:
    """The CSV's columns as CSV on the Web metadata: each column's name (the header), its
    datatype, and whether it is ever empty (``required``). ``long``: the ``--long`` table."""
    if long is not None and long not in LONG_KINDS:
        raise ValueError(f"--long takes one of {', '.join(LONG_KINDS)}, not {long!r}")
    if long == "sources":
        columns, key = (_ID, *SOURCE.fields), ["id", "index"]
    elif long == "citations":
        columns, key = (_ID, _ORDINAL, *CITATION.fields), ["id", "ordinal"]
    else:
        columns, key = record_fields(versions=versions), ["id"]
        if versions:
            key = ["id", "answer_version"]
    leads = " ".join(repr(c) for c in FORMULA_LEADS)
    return {
        "@context": CSVW_CONTEXT,
        "dc:title": "ground export (CSV)",
        "dc:description": "Lists and objects are JSON text; an empty cell is null; a text"
        f" cell that starts with one of {leads} has a leading ' (a spreadsheet would run it as"
        " a formula), unless exported with --csv-raw",
        "dialect": {
            "encoding": "utf-8",
            "delimiter": ",",
            "quoteChar": '"',
            "doubleQuote": True,
            "lineTerminators": ["\r\n"],
            "header": True,
        },
        "tableSchema": {
            "columns": [_csvw_column(f) for f in columns],
            "primaryKey": key if len(key) > 1 else key[0],
        },
    }
