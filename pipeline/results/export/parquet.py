"""Parquet via pyarrow (optional: ``pip install 'ground[parquet]'``), nested types kept.

``sources`` and ``citations`` are lists of structs and the queries lists of strings, so a reader
gets them typed. ``metadata``, ``structured`` and ``provenance`` hold whatever the user's input
and schema made them, which has no one Arrow type: they are JSON text columns.

Memory: records are gathered column by column (one Python list per column, no per-row dict
copies) and turned into an Arrow record batch every :data:`BATCH_ROWS`, so few Python objects
live at once. Batches are written as one row group per :data:`ROW_GROUP_ROWS`: the writer keeps
every row group's metadata (about 52 KB for this schema, measured with pyarrow 26) until the
file is closed, so 2,000-row groups grew by 26 MB per million questions. Dictionary
encoding is kept for the few low-cardinality columns (:data:`_DICTIONARY`): on long, unique
text (answers, questions, JSON, nested lists) a dictionary only grows until pyarrow gives up
on it, in memory, per column. Statistics (min/max) are written for the scalar columns that
are filtered on (:data:`_STATISTICS`), not for long text, where they are large and useless.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from pipeline.results.export.records import (
    BOOLEAN_FIELDS,
    FIELDS,
    FLOAT_FIELDS,
    INTEGER_FIELDS,
    SCALAR_FIELDS,
)

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 500  # records gathered as Python values before becoming one Arrow batch
ROW_GROUP_ROWS = 10_000  # records per Parquet row group (held as Arrow batches until written)
MISSING = "Parquet export needs pyarrow: pip install 'ground[parquet]'"
_JSON_TEXT = frozenset({"metadata", "structured", "structured_errors", "provenance"})
# Few distinct values: dictionary-encoded (smaller files, cheap to build).
_DICTIONARY = ("class", "state", "model", "model_version", "finish_reason", "error_class")
# Long or free text: no min/max statistics (nested columns have none either).
_NO_STATISTICS = frozenset({"question", "answer", "last_error"}) | _JSON_TEXT
_STATISTICS = tuple(name for name in SCALAR_FIELDS if name not in _NO_STATISTICS)


class ParquetUnavailable(RuntimeError):
    """pyarrow is not installed; the message names the extra to install."""


def _pyarrow() -> Any:
    # Before pyarrow's first import: the system allocator, not mimalloc, whose arenas kept
    # about 20 MB more resident here (the user's own setting wins).
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
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
            ("doc_id", pa.string()),
            ("first_page", pa.int32()),
            ("last_page", pa.int32()),
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
    """Records in, Parquet row groups out, built column-wise (see the module's docstring)."""

    def __init__(self, out: BinaryIO) -> None:
        pa, pq = _pyarrow()
        self._pa = pa
        self._schema = schema()
        self._pool = pa.default_memory_pool()
        self._writer = pq.ParquetWriter(
            out,
            self._schema,
            memory_pool=self._pool,
            compression="zstd",
            use_dictionary=list(_DICTIONARY),
            write_statistics=list(_STATISTICS),
        )
        self._columns: dict[str, list[Any]] = {name: [] for name in self._schema.names}
        self._rows = 0  # gathered in self._columns
        self._batches: list[pa.RecordBatch] = []
        self._batched_rows = 0  # held in self._batches

    def write(self, records: Sequence[dict[str, Any]]) -> None:
        for name, column in self._columns.items():
            if name in _JSON_TEXT:
                column.extend(_json_text(record[name]) for record in records)
            else:
                column.extend(record[name] for record in records)
        self._rows += len(records)
        if self._rows >= BATCH_ROWS:
            self._to_batch()
        if self._batched_rows >= ROW_GROUP_ROWS:
            self._write_row_group()

    def _to_batch(self) -> None:
        if not self._rows:
            return
        pa = self._pa
        arrays = [
            pa.array(self._columns[field.name], type=field.type, memory_pool=self._pool)
            for field in self._schema
        ]
        self._batches.append(pa.RecordBatch.from_arrays(arrays, schema=self._schema))
        self._batched_rows += self._rows
        for column in self._columns.values():
            column.clear()
        self._rows = 0

    def _write_row_group(self) -> None:
        if not self._batched_rows:
            return
        table = self._pa.Table.from_batches(self._batches, schema=self._schema)
        self._writer.write_table(table, row_group_size=self._batched_rows)
        self._batches.clear()
        self._batched_rows = 0

    def close(self) -> None:
        self._to_batch()
        self._write_row_group()
        self._writer.close()
