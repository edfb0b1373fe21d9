"""Parquet via pyarrow (optional: ``pip install 'ground[parquet]'``), nested types kept.

``sources`` and ``citations`` are lists of structs and the queries lists of strings, so a reader
gets them typed. ``metadata``, ``structured`` and ``provenance`` hold whatever the user's input
and schema made them, which has no one Arrow type: they are JSON text columns.
Records are buffered into row groups of :data:`ROW_GROUP_ROWS`, which bounds memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from pipeline.export.records import BOOLEAN_FIELDS, FIELDS, FLOAT_FIELDS, INTEGER_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa

ROW_GROUP_ROWS = 2_000  # records per Parquet row group (each is built in memory)
MISSING = "Parquet export needs pyarrow: pip install 'ground[parquet]'"
_JSON_TEXT = ("metadata", "structured", "structured_errors", "provenance")


class ParquetUnavailable(RuntimeError):
    """pyarrow is not installed; the message names the extra to install."""


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ParquetUnavailable(MISSING) from None
    return pa, pq


def schema() -> pa.Schema:
    pa, _ = _pyarrow()
    source = pa.struct(
        [
            ("index", pa.int32()),
            ("kind", pa.string()),
            ("title", pa.string()),
            ("uri", pa.string()),
            ("domain", pa.string()),
            ("destination", pa.string()),
            ("resolve_status", pa.string()),
            ("resolved_at", pa.string()),
        ]
    )
    citation = pa.struct(
        [
            ("start", pa.int32()),
            ("end", pa.int32()),
            ("text", pa.string()),
            ("chunk_indices", pa.list_(pa.int32())),
            ("confidence_scores", pa.list_(pa.float64())),
            ("links", pa.list_(pa.string())),
            ("part_index", pa.int32()),
            ("byte_start", pa.int32()),
            ("byte_end", pa.int32()),
        ]
    )
    types: dict[str, Any] = {
        **dict.fromkeys(BOOLEAN_FIELDS, pa.bool_()),
        **dict.fromkeys(FLOAT_FIELDS, pa.float64()),
        **dict.fromkeys(INTEGER_FIELDS, pa.int64()),
        "web_search_queries": pa.list_(pa.string()),
        "retrieval_queries": pa.list_(pa.string()),
        "warnings": pa.list_(pa.string()),
        "sources": pa.list_(source),
        "citations": pa.list_(citation),
    }
    return pa.schema([(name, types.get(name, pa.string())) for name in FIELDS])


def _json_text(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


class ParquetWriter:
    def __init__(self, out: BinaryIO) -> None:
        pa, pq = _pyarrow()
        self._pa = pa
        self._schema = schema()
        self._writer = pq.ParquetWriter(out, self._schema, compression="zstd")
        self._pending: list[dict[str, Any]] = []

    def write(self, records: Sequence[dict[str, Any]]) -> None:
        for record in records:
            row = dict(record)
            for name in _JSON_TEXT:
                row[name] = _json_text(row[name])
            self._pending.append(row)
        if len(self._pending) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            table = self._pa.Table.from_pylist(self._pending, schema=self._schema)
            self._writer.write_table(table)
            self._pending = []

    def close(self) -> None:
        self._flush()
        self._writer.close()
