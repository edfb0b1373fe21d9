"""The export's schemas, all derived from the one field table: JSON Schema, CSV on the Web,
Arrow (with ``structured`` typed from the job's JSON Schema, or JSON text), SQL."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateTable

from pipeline.grounding.mapping import Source
from pipeline.results.export.arrow import ArrowBatches, arrow_schema
from pipeline.results.export.parquet import dictionary_columns
from pipeline.results.export.records import (
    CITATION_FIELDS,
    FIELDS,
    RECORD,
    SOURCE,
    SOURCE_FIELDS,
    VERSION_FIELDS,
    Kind,
    ListOf,
    Struct,
    record_fields,
)
from pipeline.results.export.schema import csv_schema, json_schema
from pipeline.results.export.structured import fits, structured_shape
from pipeline.results.export.table import results_table
from pipeline.results.export.writers import csv_columns
from tests.support.exports import NOW, record
from tests.support.paths import DEMO_SCHEMA

DEMO = json.loads(DEMO_SCHEMA.read_text(encoding="utf-8"))


def as_jsonl(value: dict[str, Any]) -> dict[str, Any]:
    """What a JSONL line decodes to (timestamps as text)."""
    return json.loads(json.dumps(value, default=lambda v: v.isoformat()))


def test_field_names_are_unique_and_the_old_lists_are_derived() -> None:
    names = [f.name for f in record_fields(versions=True)]
    assert len(names) == len(set(names))
    assert names == [*FIELDS, *VERSION_FIELDS]
    # A source is exported as Source.to_dict() gives it, then where its redirect led.
    assert SOURCE_FIELDS[: len(SOURCE_FIELDS) - 3] == tuple(
        Source(0, "web", None, None, None, None, None, None).to_dict()
    )
    assert SOURCE_FIELDS[-3:] == ("destination", "resolve_status", "resolved_at")
    assert {"search_entry_point_html", "url_context_statuses", "tool_part_kinds"} <= set(FIELDS)


# --- structured: its Arrow shape from the job's JSON Schema ----------------------------------


def test_the_demo_schema_becomes_a_struct() -> None:
    shape = structured_shape(DEMO)
    assert isinstance(shape, Struct)
    types = {f.name: f.type for f in shape.fields}
    assert list(types) == list(DEMO["properties"])
    assert types["city"] is Kind.STRING
    assert types["population"] is Kind.INT64  # ["integer", "null"]
    assert types["area"] is Kind.STRING  # an enum of strings
    facts = types["facts"]
    assert isinstance(facts, ListOf) and isinstance(facts.item, Struct)
    assert {f.name: f.type for f in facts.item.fields} == {
        "claim": Kind.STRING,
        "number": Kind.FLOAT,
        "year": Kind.INT64,
    }


@pytest.mark.parametrize(
    ("schema", "typed"),
    [
        ({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}}, False),
        ({"type": "object", "properties": {"a": {"type": "object"}}}, False),  # free-form
        ({"type": "object", "additionalProperties": {"type": "string"}}, False),
        ({"type": "object", "properties": {"a": {}}}, False),  # any value
        ({"type": "object", "properties": {"a": {"prefixItems": [{"type": "string"}]}}}, False),
        (
            {
                "type": "object",
                "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
            },
            False,
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            },
            True,
        ),
        ({"type": "object", "properties": {"a": {"enum": [1, 2.5, None]}}}, True),
        ({"type": "object", "properties": {"a": {"const": "x"}}}, True),
        (
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/b"}},
                "$defs": {"b": {"type": "array", "items": {"type": "boolean"}}},
            },
            True,
        ),
        (  # a cycle through an optional property has no finite Arrow type
            {
                "type": "object",
                "properties": {"next": {"$ref": "#"}, "v": {"type": "string"}},
            },
            False,
        ),
    ],
)
def test_a_schema_with_one_shape_is_typed_and_any_other_is_json(
    schema: dict[str, Any], typed: bool
) -> None:
    assert (structured_shape(schema) is not None) is typed


def test_fits_is_strict_so_nothing_is_dropped_or_rounded() -> None:
    shape = structured_shape(DEMO)
    assert shape is not None
    good = {"city": "Kraków", "population": 800000.0, "facts": [{"claim": "x", "number": 1}]}
    assert fits(good, shape)
    assert fits(None, shape) and fits({"city": None}, shape)
    assert not fits({**good, "mayor": "x"}, shape)  # a key the struct would drop
    assert not fits({**good, "population": 1.5}, shape)  # would be rounded
    assert not fits({**good, "population": True}, shape)  # a bool is no number
    assert not fits({**good, "population": 2**63}, shape)  # beyond int64
    assert not fits({**good, "facts": [{"claim": 3}]}, shape)
    assert not fits({**good, "entities": "Kraków"}, shape)
    assert not fits(["not", "an", "object"], shape)


# --- Arrow ---------------------------------------------------------------------------------------


def test_arrow_types_timestamps_enums_json_and_the_structured_columns() -> None:
    typed = arrow_schema(structured_shape(DEMO))
    assert typed.field("answered_at").type == pa.timestamp("us", tz="UTC")
    assert typed.field("state").type == pa.dictionary(pa.int32(), pa.string())
    assert not typed.field("state").nullable and typed.field("answer").nullable
    assert typed.field("metadata_json").type == pa.string()  # no declared type: JSON text
    assert "metadata" not in typed.names
    source = typed.field("sources").type.value_type
    assert source.field("resolved_at").type == pa.timestamp("us", tz="UTC")
    assert source.field("custom_metadata_json").type == pa.list_(
        pa.field("element", pa.string(), nullable=False)
    )
    assert pa.types.is_struct(typed.field("structured").type)
    assert typed.field("structured").type.field("population").type == pa.int64()
    assert typed.field("structured_json").type == pa.string()
    assert typed.field("search_entry_point_html").metadata[b"description"]
    untyped = arrow_schema(None)
    assert "structured" not in untyped.names and "structured_json" in untyped.names
    assert "answer_version" in arrow_schema(None, versions=True).names
    assert "sources.list.element.kind" in dictionary_columns(RECORD)
    assert "tool_part_kinds.list.element" in dictionary_columns(RECORD)


def test_an_object_that_does_not_fit_is_kept_as_json_text_beside_the_typed_column() -> None:
    builder = ArrowBatches(structured_shape(DEMO))
    fitting = {"city": "Kraków", "population": 804237, "facts": []}
    invalid = {"city": "Kraków", "population": 1.5, "facts": []}
    builder.add(
        [
            record(id="a", structured=fitting),
            record(id="b", structured=invalid),
            record(id="c", metadata={"lang": "pl", "n": [1]}),
        ]
    )
    batch = builder.flush()
    assert batch is not None and builder.flush() is None
    rows = batch.to_pylist()
    assert rows[0]["structured"]["population"] == 804237 and rows[0]["structured_json"] is None
    assert rows[1]["structured"] is None
    assert json.loads(rows[1]["structured_json"]) == invalid  # 1.5, not rounded to 1
    assert rows[2]["structured"] is None and rows[2]["structured_json"] is None
    assert json.loads(rows[2]["metadata_json"]) == {"lang": "pl", "n": [1]}
    assert rows[0]["updated_at"] == NOW


# --- JSON Schema ----------------------------------------------------------------------------


def validator(document: dict[str, Any]) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(
        document, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def test_a_record_validates_and_the_schema_is_closed() -> None:
    check = validator(json_schema())
    source = {f.name: [] if isinstance(f.type, ListOf) else None for f in SOURCE.fields} | {
        "index": 0,
        "kind": "web",
        "resolve_status": "resolved",
        "resolved_at": NOW,
    }
    good = record(
        sources=[source],
        url_context_statuses=[{"url": "https://x", "status": "URL_RETRIEVAL_STATUS_SUCCESS"}],
        tool_part_kinds=["toolCall", "toolResponse"],
        search_entry_point_html="<style>.x{}</style>\r\n<div>東京</div>",
    )
    check.validate(as_jsonl(good))
    for bad in (
        {**good, "surprise": 1},  # closed
        {**good, "state": "finished"},  # a closed enum
        {**good, "calls": None},  # required: never null
        {**good, "sources": [{**source, "kind": "carrier pigeon"}]},
        {k: v for k, v in good.items() if k != "answer"},  # every key is present
    ):
        assert not check.is_valid(as_jsonl(bad))


@pytest.mark.parametrize(
    "job_schema",
    [
        DEMO,
        {  # draft-07 with definitions and a local $ref: embedded, its refs still resolve
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"city": {"$ref": "#/definitions/name"}},
            "required": ["city"],
            "definitions": {"name": {"type": "string", "minLength": 2}},
        },
    ],
)
def test_an_object_its_schema_passed_must_match_the_embedded_job_schema(
    job_schema: dict[str, Any],
) -> None:
    check = validator(json_schema(job_schema, schema_hash="h1"))
    made = {"city": "Kraków", "population": 804237, "answer_summary": "x", "facts": []}
    assert check.is_valid(
        as_jsonl(record(structured=made, structured_valid=True, schema_hash="h1"))
    )
    wrong = {"city": 7}
    assert not check.is_valid(
        as_jsonl(record(structured=wrong, structured_valid=True, schema_hash="h1"))
    )
    # An invalid output, or one made by another schema, is stored and exported as it is.
    assert check.is_valid(
        as_jsonl(record(structured=wrong, structured_valid=False, schema_hash="h1"))
    )
    assert check.is_valid(
        as_jsonl(record(structured=wrong, structured_valid=True, schema_hash="old"))
    )


# --- CSV and SQL ----------------------------------------------------------------------------


@pytest.mark.parametrize("long", [None, "sources", "citations"])
@pytest.mark.parametrize("versions", [False, True])
def test_csv_schema_names_the_header_columns(long: str | None, versions: bool) -> None:
    if long is not None and versions:
        return
    document = csv_schema(long, versions=versions)
    columns = document["tableSchema"]["columns"]
    assert tuple(c["name"] for c in columns) == csv_columns(long, versions=versions)
    types = {c["name"]: c["datatype"] for c in columns}
    if long is None:
        assert types["answered_at"] == "datetime" and types["sources"] == "json"
        assert types["grounded"] == {"base": "boolean", "format": "true|false"}
    if long == "citations":
        assert tuple(types)[2:] == CITATION_FIELDS


def test_the_table_is_keyed_by_job_and_id_with_timestamptz_and_jsonb() -> None:
    table = results_table("answers")
    assert [c.name for c in table.primary_key.columns] == ["job", "id"]
    ddl = str(CreateTable(table).compile(dialect=postgresql.dialect()))
    assert "answered_at TIMESTAMP WITH TIME ZONE" in ddl
    assert "sources JSONB" in ddl and "structured JSONB" in ddl and "metadata JSONB" in ddl
    assert "search_entry_point_html TEXT" in ddl
    assert "PRIMARY KEY (job, id)" in ddl
    assert isinstance(table.c.calls.type, sa.BigInteger)


def test_image_search_queries_are_a_typed_list_of_strings_in_every_schema() -> None:
    """imageSearchQueries is exported as every other query list: a required list of strings
    in JSON Schema (so ``ground export --schema`` and the generated reference show it), a
    list<string> in Arrow/Parquet, a JSON column in CSV."""
    assert "image_search_queries" in FIELDS
    assert FIELDS.index("image_search_queries") == FIELDS.index("retrieval_queries") + 1
    prop = json_schema()["properties"]["image_search_queries"]
    assert prop["type"] == "array" and prop["items"] == {"type": "string"}
    assert "image_search_queries" in json_schema()["required"]
    arrow = arrow_schema(None).field("image_search_queries")
    assert pa.types.is_list(arrow.type) and arrow.type.value_type == pa.string()
    columns = {c["name"]: c["datatype"] for c in csv_schema(None)["tableSchema"]["columns"]}
    assert columns["image_search_queries"] == "json"
    check = validator(json_schema())
    check.validate(as_jsonl(record(image_search_queries=["Wawel dragon photo"])))
    assert not check.is_valid(as_jsonl(record(image_search_queries=[1])))
    assert not check.is_valid(as_jsonl(record(image_search_queries=None)))
    batch = ArrowBatches(None)
    batch.add([record(image_search_queries=["Wawel dragon photo", ""])])
    table = batch.flush()
    assert table is not None
    assert table.to_pylist()[0]["image_search_queries"] == ["Wawel dragon photo", ""]
