"""Reading exports back in the JSONL record's terms, to compare formats with each other."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import orjson

JSON_SUFFIX = "_json"


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
            out[key.removesuffix(JSON_SUFFIX)] = None if item is None else json.loads(item)
        else:
            out[key] = as_json(item)
    return out


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def without_none(value: Any) -> Any:
    """``value`` with every None-valued key of its objects dropped (what a struct adds)."""
    return _drop_none(value)
