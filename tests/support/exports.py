"""Export records for tests: one made up (:func:`record`), and exports read back in the JSONL
record's terms (:func:`as_json`), to compare formats with each other."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import orjson

from pipeline.results.export.records import RECORD, ListOf

JSON_SUFFIX = "_json"
NOW = dt.datetime(2025, 1, 31, 9, 30, 0, 123456, tzinfo=dt.UTC)


def record(**values: Any) -> dict[str, Any]:
    """A record of every field: lists empty, the rest null (the required ones set), then
    ``values``."""
    out: dict[str, Any] = {f.name: [] if isinstance(f.type, ListOf) else None for f in RECORD}
    out.update(
        id="q1",
        question="Wie viele Einwohner hat Kraków?",
        state="done",
        updated_at=NOW,
        input_tokens=0,
        output_tokens=0,
        grounding_units=0,
        calls=0,
        cost_usd=0.0,
        cost_complete=True,
        attempts=1,
    )
    out.update(values)
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def as_json(value: Any) -> Any:
    """A value read from Parquet or a table, as JSONL holds it: timestamps as ISO 8601 text,
    ``NAME_json`` fields decoded under NAME, the typed ``structured`` merged with its
    ``structured_json`` (keys the object left out are None in a struct: dropped)."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat()
    if isinstance(value, list):
        return [as_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "structured" and "structured_json" in value:
            continue
        if key == "structured_json":
            typed = value.get("structured")
            out["structured"] = json.loads(item) if item is not None else _drop_none(typed)
        elif key.endswith(JSON_SUFFIX):
            out[key.removesuffix(JSON_SUFFIX)] = _decoded(item)
        else:
            out[key] = as_json(item)
    return out


def _decoded(item: Any) -> Any:
    if item is None:
        return None
    if isinstance(item, list):
        return [json.loads(x) for x in item]
    return json.loads(item)


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def without_none(value: Any) -> Any:
    """``value`` with every None-valued key of its objects dropped (what a struct adds)."""
    return _drop_none(value)
