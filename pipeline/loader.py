"""Loading questions from CSV, JSONL or a SQL query into the queue: streamed, idempotent, all
or nothing.

A query (``[source] query`` on ``[source] url``) is read through a server-side cursor in
partitions of :data:`CHUNK_ROWS`; its columns are the fields a file row would have, and its
errors name the row (its number and id) and the column, like a file's name ``file:line``.

* Streamed: rows are read and inserted in chunks of :data:`CHUNK_ROWS`, so memory stays flat
  however large the file is.
* Idempotent on the question id: a row whose id is already loaded with the same text is counted
  as ``existing`` and left alone; loading the same file twice adds nothing.
* One transaction: a malformed row (bad JSON, missing id or text, an id seen with different
  text) raises :class:`LoadError` naming ``file:line`` and the reason, and the caller's
  transaction is rolled back, so the database is unchanged.
"""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.jobspec import JobSpec, SourceSection
from pipeline.states import QuestionState
from pipeline.store.tables import questions
from pipeline.store.upsert import insert_ignoring_conflicts

CHUNK_ROWS = 1_000  # rows per insert; bounds memory and statement size
MAX_ID_LENGTH = 512  # characters, the column's width


class LoadError(ValueError):
    """A question file that cannot be loaded; the message names ``file:line``."""


@dataclass(frozen=True, slots=True)
class Row:
    line: int
    qid: str
    text: str
    qclass: str | None
    meta: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class LoadResult:
    added: int
    existing: int

    @property
    def total(self) -> int:
        return self.added + self.existing


def read_rows(path: Path, source: SourceSection) -> Iterator[Row]:
    """Yield validated rows from a CSV or JSONL file, one at a time."""
    fmt = source.format
    if fmt == "auto":
        fmt = "csv" if path.suffix.lower() == ".csv" else "jsonl"
    try:
        if fmt == "csv":
            yield from _read_csv(path, source)
        else:
            yield from _read_jsonl(path, source)
    except FileNotFoundError:
        raise LoadError(f"{path}: no such question file") from None
    except IsADirectoryError:
        raise LoadError(f"{path}: is a directory, not a question file") from None
    except UnicodeDecodeError as exc:
        raise LoadError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_jsonl(path: Path, source: SourceSection) -> Iterator[Row]:
    with path.open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise LoadError(f"{path}:{line_no}: not valid JSON: {exc}") from None
            if not isinstance(record, dict):
                raise LoadError(f"{path}:{line_no}: expected a JSON object per line")
            yield _row(path, line_no, record, source)


def _read_csv(path: Path, source: SourceSection) -> Iterator[Row]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None:
            return
        for field in (source.id_field, source.text_field):
            if field not in reader.fieldnames:
                raise LoadError(f"{path}:1: the header has no column {field!r}")
        try:
            for record in reader:
                if None in record:
                    raise LoadError(f"{path}:{reader.line_num}: more fields than the header")
                yield _row(path, reader.line_num, record, source)
        except csv.Error as exc:
            raise LoadError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None


def _row(path: Path | str, line: int, record: dict[str, Any], source: SourceSection) -> Row:
    raw_id = record.get(source.id_field)
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        raise LoadError(f"{path}:{line}: missing or non-scalar id field {source.id_field!r}")
    qid = str(raw_id).strip()
    if not qid:
        raise LoadError(f"{path}:{line}: empty id field {source.id_field!r}")
    if len(qid) > MAX_ID_LENGTH:
        raise LoadError(f"{path}:{line}: id longer than {MAX_ID_LENGTH} characters")
    text = record.get(source.text_field)
    if not isinstance(text, str) or not text.strip():
        raise LoadError(f"{path}:{line}: missing or empty text field {source.text_field!r}")
    qclass = None
    if source.class_field:
        value = record.get(source.class_field)
        qclass = None if value in (None, "") else str(value)
    meta = {k: record[k] for k in source.metadata_fields if k in record} or None
    # One rule for both backends: PostgreSQL cannot store NUL in text, SQLite can; such a row
    # is refused here, with its line, rather than mid-run on one backend only.
    if "\x00" in qid or "\x00" in text or (qclass is not None and "\x00" in qclass):
        raise LoadError(f"{path}:{line}: a NUL character (\\u0000) in the id, text or class")
    return Row(line, qid, text, qclass, meta)


async def load_questions(
    connection: AsyncConnection,
    job_id: int,
    path: Path,
    source: SourceSection,
    *,
    max_chars: int | None = None,
) -> LoadResult:
    """Insert the file's new questions in the caller's transaction; a question longer than
    ``max_chars`` is a bad row."""
    rows = _async(read_rows(path, source))
    return await _load_rows(connection, job_id, rows, path, max_chars=max_chars)


async def load_source(connection: AsyncConnection, job_id: int, spec: JobSpec) -> LoadResult:
    """Insert the job's new questions, from its file or its query, in the caller's transaction."""
    max_chars = spec.limits.max_question_chars
    if spec.source.query:
        rows = read_query_rows(spec.source)
        return await _load_rows(connection, job_id, rows, QUERY_LABEL, max_chars=max_chars)
    return await load_questions(
        connection, job_id, spec.source_path, spec.source, max_chars=max_chars
    )


def source_name(spec: JobSpec) -> str:
    """How messages name the job's questions' origin."""
    return "the source query" if spec.source.query else spec.source_path.name


QUERY_LABEL = "[source] query row"


async def _async(rows: Iterator[Row]) -> AsyncIterator[Row]:
    for row in rows:
        yield row


async def read_query_rows(source: SourceSection) -> AsyncIterator[Row]:
    """Yield validated rows from ``source.query`` on ``source.url``, streamed in partitions."""
    from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
    from sqlalchemy.ext.asyncio import create_async_engine

    from pipeline.export import async_url

    try:
        engine = create_async_engine(async_url(source.url))
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise LoadError(f"[source] url: cannot use this database URL ({exc})") from None
    try:
        async with engine.connect() as connection:
            try:
                result = await connection.stream(
                    sa.text(source.query).execution_options(yield_per=CHUNK_ROWS)
                )
                columns = list(result.keys())
                for field in (source.id_field, source.text_field):
                    if field not in columns:
                        raise LoadError(
                            f"[source] query: the result has no column {field!r}"
                            f" (it has {', '.join(columns) or 'none'})"
                        )
                number = 0
                async for partition in result.mappings().partitions():
                    for record in partition:
                        number += 1
                        try:
                            row = _row(QUERY_LABEL, number, dict(record), source)
                        except LoadError as exc:
                            qid = record.get(source.id_field)
                            raise LoadError(f"{exc} (id {qid!r})" if qid else str(exc)) from None
                        yield row
            except DBAPIError as exc:
                reason = str(exc.orig or exc).strip().splitlines()[0]
                raise LoadError(f"[source] query failed: {reason}") from None
    except OSError as exc:
        raise LoadError(f"[source] url: cannot connect ({exc.strerror or exc})") from None
    finally:
        await engine.dispose()


async def _load_rows(
    connection: AsyncConnection,
    job_id: int,
    rows: AsyncIterator[Row],
    path: Path | str,
    *,
    max_chars: int | None = None,
) -> LoadResult:
    added = existing = 0
    chunk: dict[str, Row] = {}
    async for row in rows:
        if max_chars is not None and len(row.text) > max_chars:
            # Refused here, with its line: sent, it would only come back as a 400 (too many
            # input tokens), or wait on a token quota it can never fit.
            raise LoadError(
                f"{path}:{row.line}: the question is {len(row.text):,} characters long, over"
                f" [limits] max_question_chars = {max_chars:,} (id {row.qid!r})"
            )
        earlier = chunk.get(row.qid)
        if earlier is not None:
            if earlier.text != row.text:
                raise LoadError(
                    f"{path}:{row.line}: id {row.qid!r} already appears on line {earlier.line} "
                    "with different text"
                )
            continue
        chunk[row.qid] = row
        if len(chunk) >= CHUNK_ROWS:
            a, e = await _insert_chunk(connection, job_id, path, chunk)
            added, existing, chunk = added + a, existing + e, {}
    if chunk:
        a, e = await _insert_chunk(connection, job_id, path, chunk)
        added, existing = added + a, existing + e
    return LoadResult(added, existing)


async def _insert_chunk(
    connection: AsyncConnection, job_id: int, path: Path | str, chunk: dict[str, Row]
) -> tuple[int, int]:
    q = questions.c
    stored = await connection.execute(
        sa.select(q.qid, q.text).where(q.job_id == job_id, q.qid.in_(list(chunk)))
    )
    existing = 0
    for qid, text in stored:
        row = chunk.pop(qid)
        if text != row.text:
            raise LoadError(f"{path}:{row.line}: id {qid!r} is already loaded with different text")
        existing += 1
    if not chunk:
        return 0, existing
    now = utcnow()
    # Another worker loading the same file at the same moment may insert some of these rows
    # first: those are skipped here, not errors.
    result = await connection.execute(
        insert_ignoring_conflicts(connection, questions),
        [
            {
                "job_id": job_id,
                "qid": row.qid,
                "text": row.text,
                "qclass": row.qclass,
                "meta": row.meta,
                "state": QuestionState.PENDING,
                "attempts": 0,
                "created_at": now,
                "updated_at": now,
            }
            for row in chunk.values()
        ],
    )
    added = result.rowcount if result.rowcount >= 0 else len(chunk)
    return added, existing + len(chunk) - added
