"""Questions in memory as rows: a pandas or Polars DataFrame, a pyarrow Table (or record
batch, or reader) or an iterable of dicts, each row a mapping of field to value.

Frames go through Arrow, so that a missing value is None whatever the frame (pandas' NaN
included): pandas and Polars need pyarrow (``pip install 'ground[pandas]'`` or
``'ground[polars]'``), imported only when a frame comes. Rows are read a batch at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pipeline.errors import GroundError
from pipeline.results.api import MissingExtra

__all__ = [
    "UnsupportedFrame",
    "frame_rows",
]

BATCH_ROWS = 10_000  # rows converted from Arrow at a time
_EXTRA = {"pandas": "pandas", "polars": "polars", "pyarrow": "parquet"}


class UnsupportedFrame(GroundError, TypeError):
    """Questions given as something that is no frame, table nor iterable of dicts."""


def frame_rows(frame: object) -> Iterable[Mapping[str, Any]]:
    """The rows of ``frame``, as mappings of field to value (a missing value None)."""
    library = type(frame).__module__.partition(".")[0]
    if library in _EXTRA:
        return _arrow_rows(_to_arrow(frame, library))
    if isinstance(frame, str | bytes | Mapping) or not isinstance(frame, Iterable):
        raise UnsupportedFrame(
            f"questions: a {type(frame).__name__}; expected a pandas or Polars DataFrame,"
            " a pyarrow Table or an iterable of dicts"
        )
    return frame


def _pyarrow(library: str) -> Any:
    try:
        import pyarrow as pa
    except ImportError:
        raise MissingExtra(
            f"questions from a {library} frame need pyarrow:"
            f" pip install 'ground[{_EXTRA[library]}]'"
        ) from None
    return pa


def _to_arrow(frame: Any, library: str) -> Any:
    """``frame`` as a pyarrow Table, record batch or reader."""
    pa = _pyarrow(library)
    if library == "pandas":
        return pa.Table.from_pandas(frame, preserve_index=False)
    if library == "polars":
        if hasattr(frame, "collect"):  # a LazyFrame
            frame = frame.collect()
        return frame.to_arrow()
    if isinstance(frame, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
        return frame
    raise UnsupportedFrame(f"questions: a pyarrow {type(frame).__name__}; expected a Table")


def _arrow_rows(data: Any) -> Iterator[Mapping[str, Any]]:
    if hasattr(data, "to_batches"):  # a Table
        batches = data.to_batches(max_chunksize=BATCH_ROWS)
    elif hasattr(data, "read_next_batch"):  # a reader: its batches
        batches = data
    else:  # one record batch
        batches = [data]
    for batch in batches:
        yield from batch.to_pylist()
