"""A schema's fingerprint, stored with each structured object so a changed schema is noticed."""

from __future__ import annotations

import hashlib

import orjson

from pipeline.structure.schema import PreparedSchema

__all__ = ["schema_hash"]


def schema_hash(schema: PreparedSchema) -> str:
    """SHA-256 (hex, 64 characters) of the user's schema with its keys sorted, and the wire
    field it is sent under: key order and whitespace in the file do not count."""
    canonical = orjson.dumps(
        {"schema": schema.validation_schema, "wire_field": schema.wire_field},
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(canonical).hexdigest()
