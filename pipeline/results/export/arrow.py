"""Records as Arrow record batches: the typed schema, and a builder that gathers records
column by column (used by the Parquet writer and the Python API's ``to_arrow``).

Each field of :data:`pipeline.results.export.records.RECORD` maps to one Arrow type:

* ``string``/``text`` -> ``string``; ``enum`` -> ``dictionary<int32, string>`` (state, class,
  model ...: few distinct values; inside a list or struct, such as a source's kind, a string
  that the Parquet file dictionary-encodes); ``boolean``, ``int32``, ``int64``,
  ``float`` (``double``); ``timestamp`` -> ``timestamp[us, tz=UTC]``;
* lists and structs nested as such (``sources`` is a list of structs);
* ``json`` (the input's metadata, a provenance leaf's value, File Search metadata: no declared
  type) -> JSON text (a list of them for a list), the field named ``NAME_json`` so that
  nobody takes it for a string value;
* ``structured`` -> the type derived from the job's JSON Schema
  (:mod:`pipeline.results.export.structured`), plus ``structured_json``: the JSON text of an
  object that does not fit it (an invalid output, another schema's object), null otherwise.
  Without such a type, ``structured_json`` alone holds every object as JSON text.

A field that is never null (``required``) is declared non-nullable. Each field's description
is in its metadata (``description``), so a Parquet file documents itself.

pyarrow is optional (``pip install 'ground[parquet]'``): :func:`pyarrow_modules` says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.errors import GroundError
from pipeline.results.export.records import (
    Field,
    FieldType,
    Kind,
    ListOf,
    Struct,
    record_fields,
)
from pipeline.results.export.structured import fits

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "ArrowBatches",
    "ParquetUnavailable",
    "arrow_schema",
    "pyarrow_modules",
]

MISSING = "Parquet and Arrow need pyarrow: pip install 'ground[parquet]'"
JSON_SUFFIX = "_json"  # the name of a field holding JSON text instead of a typed value
LIST_ITEM = "element"  # a list's item field


class ParquetUnavailable(GroundError, RuntimeError):
    """pyarrow is not installed; the message names the extra to install."""


def pyarrow_modules() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, or :class:`ParquetUnavailable`."""
    # Before pyarrow's first import: the system allocator, not mimalloc, whose arenas kept
    # about 20 MB more resident here (the user's own setting wins).
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ParquetUnavailable(MISSING) from None
    return pa, pq


def arrow_name(field: Field, structured: FieldType | None = None) -> str:
    """The Arrow name of ``field``: ``NAME_json`` where it holds JSON text (or a list of
    JSON texts)."""
    kind = field.type
    if isinstance(kind, ListOf):
        kind = kind.item
    if kind is Kind.JSON or (kind is Kind.STRUCTURED and structured is None):
        return field.name + JSON_SUFFIX
    return field.name


def arrow_type(
    kind: FieldType, structured: FieldType | None = None, *, nested: bool = False
) -> pa.DataType:
    """The Arrow type of a field's type; ``nested``: inside a list or struct, where an enum is
    a plain string (pyarrow cannot read a dictionary nested in a list back from a file of
    several row groups: "Nested data conversions not implemented for chunked array
    outputs"); the Parquet file still dictionary-encodes it on disk."""
    pa, _ = pyarrow_modules()
    if isinstance(kind, ListOf):
        # "element": the name the Parquet format gives a list's items (a file read back
        # has it), so the Arrow stream and the file have one schema.
        item = pa.field(LIST_ITEM, arrow_type(kind.item, nested=True), nullable=kind.items_nullable)
        return pa.list_(item)
    if isinstance(kind, Struct):
        return pa.struct([_arrow_field(f, nested=True) for f in kind.fields])
    if kind is Kind.STRUCTURED:
        return arrow_type(structured, nested=True) if structured is not None else pa.string()
    scalars = {
        Kind.STRING: pa.string(),
        Kind.TEXT: pa.string(),
        Kind.ENUM: pa.string() if nested else pa.dictionary(pa.int32(), pa.string()),
        Kind.BOOLEAN: pa.bool_(),
        Kind.INT32: pa.int32(),
        Kind.INT64: pa.int64(),
        Kind.FLOAT: pa.float64(),
        Kind.TIMESTAMP: pa.timestamp("us", tz="UTC"),
        Kind.JSON: pa.string(),
    }
    return scalars[kind]


def _arrow_field(
    field: Field, structured: FieldType | None = None, *, nested: bool = False
) -> pa.Field:
    pa, _ = pyarrow_modules()
    metadata = {"description": field.doc} if field.doc else None
    return pa.field(
        arrow_name(field, structured),
        arrow_type(field.type, structured, nested=nested),
        nullable=not field.required,
        metadata=metadata,
    )


STRUCTURED_JSON_DOC = (
    "call 2's object as JSON text, where the structured column cannot hold it (an invalid"
    " output, or an object made with another schema)"
)


def arrow_fields(structured: FieldType | None, *, versions: bool = False) -> list[pa.Field]:
    """The Arrow fields of a record, in order (see the module docstring)."""
    pa, _ = pyarrow_modules()
    out = []
    for field in record_fields(versions=versions):
        out.append(_arrow_field(field, structured))
        if field.type is Kind.STRUCTURED and structured is not None:
            out.append(
                pa.field(
                    field.name + JSON_SUFFIX,
                    pa.string(),
                    metadata={"description": STRUCTURED_JSON_DOC},
                )
            )
    return out


def arrow_schema(structured: FieldType | None, *, versions: bool = False) -> pa.Schema:
    pa, _ = pyarrow_modules()
    return pa.schema(arrow_fields(structured, versions=versions))


def _json_text(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


Convert = Callable[[Any], Any]
# Stand-ins for the record key of the two structured columns (no record field has a space).
_TYPED = "structured (typed)"
_JSON_TEXT = "structured (JSON text)"


def _converter(kind: FieldType) -> Convert | None:
    """What turns a record's value into the Arrow field's value: JSON text where the type
    says ``json`` (with the ``_json`` name), nested; None where the value goes in as it is."""
    if kind is Kind.JSON:
        return _json_text
    if isinstance(kind, ListOf):
        inner = _converter(kind.item)
        if inner is None:
            return None
        return lambda v: None if v is None else [inner(x) for x in v]
    if isinstance(kind, Struct):
        parts = [(f.name, arrow_name(f), _converter(f.type)) for f in kind.fields]
        if all(convert is None for _, _, convert in parts):
            return None

        def struct(v: Any) -> Any:
            if v is None:
                return None
            return {out: (c(v.get(k)) if c else v.get(k)) for k, out, c in parts}

        return struct
    return None


class ArrowBatches:
    """Records in, Arrow record batches out: values gathered per column (one Python list per
    column, no per-row copies) until :meth:`flush` turns them into one batch."""

    def __init__(
        self,
        structured: FieldType | None,
        *,
        versions: bool = False,
        memory_pool: Any = None,
    ) -> None:
        pa, _ = pyarrow_modules()
        self._pa = pa
        self._pool = memory_pool
        self.schema = arrow_schema(structured, versions=versions)
        self._structured = structured
        # (record key, converter) per Arrow column, in schema order; the structured
        # columns are filled in add() (one fit test per object).
        self._sources: list[tuple[str, Convert | None]] = []
        for field in record_fields(versions=versions):
            if field.type is Kind.STRUCTURED:
                if structured is not None:
                    self._sources.append((_TYPED, None))
                self._sources.append((_JSON_TEXT, None))
            else:
                self._sources.append((field.name, _converter(field.type)))
        self._columns: list[list[Any]] = [[] for _ in self._sources]
        self.rows = 0  # gathered, not yet flushed

    def add(self, records: Sequence[dict[str, Any]]) -> None:
        objects = [record["structured"] for record in records]
        shape = self._structured
        fit = [shape is not None and fits(v, shape) for v in objects]
        for (key, convert), column in zip(self._sources, self._columns, strict=True):
            if key == _TYPED:
                column.extend(v if ok else None for v, ok in zip(objects, fit, strict=True))
            elif key == _JSON_TEXT:
                column.extend(
                    None if ok else _json_text(v) for v, ok in zip(objects, fit, strict=True)
                )
            elif convert is None:
                column.extend(record[key] for record in records)
            else:
                column.extend(convert(record[key]) for record in records)
        self.rows += len(records)

    def flush(self) -> pa.RecordBatch | None:
        """The gathered records as one batch (None when there are none); starts afresh."""
        if not self.rows:
            return None
        pa = self._pa
        arrays = [
            pa.array(column, type=field.type, memory_pool=self._pool)
            for column, field in zip(self._columns, self.schema, strict=True)
        ]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        for column in self._columns:
            column.clear()
        self.rows = 0
        return batch
