"""The optional fields a job names (``[source] class_field``, ``metadata_fields``) against the
fields its input has.

The loader takes an optional field from each row that has it, so a typo in one is accepted
without a word: every question loads with no class, or without that metadata. What the input
has is read from the CSV header, from the first :data:`FIELD_SAMPLE_ROWS` lines of a JSONL
file, or from a query's columns (the query wrapped so that it returns no row), and every named
field found nowhere is reported with the fields that are there.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from pipeline.intake.files import UTF8_BOM
from pipeline.job.sections import SourceSection

__all__ = [
    "unknown_file_fields",
    "unknown_query_fields",
]

FIELD_SAMPLE_ROWS = 1_000  # JSONL lines whose fields are looked at


@dataclass(frozen=True, slots=True)
class UnknownField:
    """A field the job names that the input does not have."""

    key: str  # the job-file key naming it: "source.class_field" or "source.metadata_fields"
    field: str
    seen: str  # where the input's fields were read: "the header", "the first 1,000 rows", ...
    columns: tuple[str, ...]  # the fields the input has there

    def message(self, origin: str) -> str:
        have = ", ".join(self.columns) or "none"
        return (
            f"{self.key}: {self.field!r} is in none of {self.seen} of {origin} (they have: {have})"
        )


def named_fields(source: SourceSection) -> list[tuple[str, str]]:
    """``(key, field)`` for every optional field the job names."""
    named = [("source.class_field", source.class_field)] if source.class_field else []
    return named + [("source.metadata_fields", name) for name in source.metadata_fields]


def unknown_file_fields(path: Path, source: SourceSection) -> list[UnknownField]:
    """The named fields a CSV or JSONL question file does not have (nothing when it cannot be
    read: the loader names that problem)."""
    named = named_fields(source)
    if not named:
        return []
    fmt = source.format
    if fmt == "auto":
        fmt = "csv" if path.suffix.lower() == ".csv" else "jsonl"
    try:
        columns, seen = _csv_header(path) if fmt == "csv" else _jsonl_fields(path)
    except (OSError, UnicodeDecodeError, csv.Error):
        return []
    return _unknown(named, columns, seen)


async def unknown_query_fields(source: SourceSection) -> list[UnknownField]:
    """The named fields a ``[source] query`` has no column for (nothing when the query cannot
    be run this way: the loader names that problem)."""
    from pipeline.store.engine import async_url

    named = named_fields(source)
    if not named:
        return []
    query = source.query.strip().rstrip(";")
    engine: AsyncEngine | None = None
    try:
        engine = create_async_engine(async_url(source.url))
        async with engine.connect() as connection:
            result = await connection.execute(
                sa.text(f"SELECT * FROM ({query}) AS ground_fields LIMIT 0")
            )
            columns = list(result.keys())
    except Exception:  # any driver's error: the load itself reports it properly
        return []
    finally:
        if engine is not None:
            await engine.dispose()
    return _unknown(named, columns, "the query's columns")


def _unknown(named: list[tuple[str, str]], columns: list[str], seen: str) -> list[UnknownField]:
    have = set(columns)
    found = tuple(columns)
    return [UnknownField(key, name, seen, found) for key, name in named if name not in have]


def _csv_header(path: Path) -> tuple[list[str], str]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        return next(csv.reader(handle), []), "the header"


def _jsonl_fields(path: Path) -> tuple[list[str], str]:
    """The fields of the first rows, in the order first seen."""
    columns: dict[str, None] = {}
    rows = 0
    with path.open("rb") as handle:
        for line in handle:
            line = line.removeprefix(UTF8_BOM).strip()
            if not line:
                continue
            rows += 1
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict):
                columns.update(dict.fromkeys(record))
            if rows >= FIELD_SAMPLE_ROWS:
                break
    seen = f"the first {rows:,} rows" if rows >= FIELD_SAMPLE_ROWS else "the rows"
    return list(columns), seen
