"""Parquet via pyarrow (optional: ``pip install 'ground[parquet]'``), every column typed.

The schema is :mod:`pipeline.results.export.arrow`'s: nested lists and structs, UTC
timestamps, dictionary-encoded enums, ``structured`` typed by the job's JSON Schema where it
can be (``structured_json`` otherwise), each field's description in its metadata.

Memory: records are gathered column by column (:class:`ArrowBatches`) and turned into an Arrow
record batch every :data:`BATCH_ROWS`, so few Python objects live at once. Batches are written
as one row group per :data:`ROW_GROUP_ROWS`: the writer keeps every row group's metadata
(about 52 KB for this schema, measured with pyarrow 26) until the file is closed, so 2,000-row
groups grew by 26 MB per million questions. Dictionary encoding is kept for the enums, nested
ones included (few distinct values): on long, unique text (answers, questions, JSON) a
dictionary only grows until pyarrow gives up on it, in memory, per column. Statistics
(min/max) are written for the top-level scalar columns that are filtered on, not for long text
or JSON, where they are large and useless.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

from pipeline.results.export.arrow import (
    ArrowBatches,
    ParquetUnavailable,
    arrow_name,
    pyarrow_modules,
)
from pipeline.results.export.records import (
    Field,
    FieldType,
    Kind,
    ListOf,
    Struct,
    record_fields,
)

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 500  # records gathered as Python values before becoming one Arrow batch
ROW_GROUP_ROWS = 10_000  # records per Parquet row group (held as Arrow batches until written)
_NO_STATISTICS = frozenset({Kind.TEXT, Kind.JSON, Kind.STRUCTURED})

__all__ = ["ParquetUnavailable", "ParquetWriter", "dictionary_columns", "statistics_columns"]


def _enum_paths(path: str, kind: FieldType) -> Iterator[str]:
    """The Parquet column paths of the enums in a field (pyarrow's compliant list layout:
    ``NAME.list.element``)."""
    if kind is Kind.ENUM:
        yield path
    elif isinstance(kind, ListOf):
        yield from _enum_paths(f"{path}.list.element", kind.item)
    elif isinstance(kind, Struct):
        for f in kind.fields:
            yield from _enum_paths(f"{path}.{arrow_name(f)}", f.type)


def dictionary_columns(fields: Sequence[Field]) -> list[str]:
    return [p for f in fields for p in _enum_paths(arrow_name(f), f.type)]


def statistics_columns(fields: Sequence[Field]) -> list[str]:
    return [f.name for f in fields if isinstance(f.type, Kind) and f.type not in _NO_STATISTICS]


class ParquetWriter:
    """Records in, Parquet row groups out (see the module's docstring). ``structured``: the
    type of call 2's object (:func:`pipeline.results.export.structured.structured_shape`)."""

    def __init__(
        self, out: BinaryIO, structured: FieldType | None = None, *, versions: bool = False
    ) -> None:
        pa, pq = pyarrow_modules()
        self._pa = pa
        pool = pa.default_memory_pool()
        self._builder = ArrowBatches(structured, versions=versions, memory_pool=pool)
        self.schema = self._builder.schema
        fields = record_fields(versions=versions)
        self._writer = pq.ParquetWriter(
            out,
            self.schema,
            memory_pool=pool,
            compression="zstd",
            use_dictionary=dictionary_columns(fields),
            write_statistics=statistics_columns(fields),
        )
        self._batches: list[pa.RecordBatch] = []
        self._batched_rows = 0  # held in self._batches

    def write(self, records: Sequence[dict[str, Any]]) -> None:
        self._builder.add(records)
        if self._builder.rows >= BATCH_ROWS:
            self._to_batch()
        if self._batched_rows >= ROW_GROUP_ROWS:
            self._write_row_group()

    def _to_batch(self) -> None:
        batch = self._builder.flush()
        if batch is not None:
            self._batches.append(batch)
            self._batched_rows += batch.num_rows

    def _write_row_group(self) -> None:
        if not self._batched_rows:
            return
        table = self._pa.Table.from_batches(self._batches, schema=self.schema)
        self._writer.write_table(table, row_group_size=self._batched_rows)
        self._batches.clear()
        self._batched_rows = 0

    def close(self) -> None:
        self._to_batch()
        self._write_row_group()
        self._writer.close()
