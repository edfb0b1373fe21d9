"""The export's fields, from the JSON Schema ``ground export --schema`` prints for a JSONL
record (:func:`pipeline.results.export.json_schema`)."""

from __future__ import annotations

from typing import Any

from pipeline.reference.markdown import GENERATED_NOTE, code, table
from pipeline.results.export.schema import json_schema


def _type(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(
            code(str(v)) if v is not None else "null" for v in schema["enum"]
        )
    kind = schema.get("type")
    if kind is None:
        return "any JSON value"
    kinds = kind if isinstance(kind, list) else [kind]
    text = " or ".join(str(k) for k in kinds)
    if "format" in schema:
        text += f" ({schema['format']})"
    if "array" in kinds and isinstance(schema.get("items"), dict):
        items = schema["items"]
        inner = "object" if "properties" in items else _type(items)
        text = text.replace("array", f"array of {inner}")
    return text


def _rows(properties: dict[str, Any], prefix: str = "") -> list[tuple[str, str, str]]:
    rows = []
    for name, schema in properties.items():
        rows.append((code(prefix + name), _type(schema), schema.get("description", "")))
        items = schema.get("items") if isinstance(schema.get("items"), dict) else None
        nested = (items or schema).get("properties")
        if isinstance(nested, dict):
            rows += _rows(nested, prefix=f"{prefix}{name}{'[]' if items else ''}.")
    return rows


def page() -> str:
    latest = json_schema()
    versions = json_schema(versions=True)
    extra = {k: v for k, v in versions["properties"].items() if k not in latest["properties"]}
    out = [
        "# Export fields",
        "",
        GENERATED_NOTE.format(source="`ground export --schema`"),
        "",
        "One record per question, as `ground export --format jsonl` writes it (CSV and Parquet"
        " hold the same fields; `ground export JOB --schema --format csv|parquet` prints"
        " theirs). Every field is present; a missing value is `null`. The"
        " [exports guide](../exports.md) says how each format writes them.",
        "",
        table(("field", "type", "what it holds"), _rows(latest["properties"])),
    ]
    if extra:
        out += [
            "",
            "## With `--all-versions`",
            "",
            "One record per stored answer version, with these fields besides:",
            "",
            table(("field", "type", "what it holds"), _rows(extra)),
        ]
    return "\n".join(out) + "\n"
