"""Loading questions from CSV, JSONL or a SQL query into the queue: streamed, idempotent, all
or nothing.

A query (``[source] query`` on ``[source] url``) is read through a server-side cursor in
partitions of :data:`CHUNK_ROWS`; its columns are the fields a file row would have, and its
errors name the row (its number and id) and the column, like a file's name ``file:line``.

* Streamed: rows are read and inserted in chunks of :data:`CHUNK_ROWS`, so memory stays flat
  however large the file is.
* Linear: each chunk is one ``INSERT ... ON CONFLICT DO NOTHING RETURNING``; only the rows it
  did not insert (the conflicts) have their stored text read and compared.
* Idempotent on the question id: a row whose id is already loaded with the same text is counted
  as ``existing`` and left alone; loading the same file twice adds nothing.
* Skipped when unchanged: the file's size, mtime and content digest are stored with a complete
  load (``source_loads``); a run finding the same file (and the same ``[source]`` settings)
  does not read it again. A query has no fingerprint: it is always read.
* All or nothing for a bad row (bad JSON, missing id or text, an id twice in the input with
  different texts): :class:`LoadError` names ``file:line`` and the reason, and the database
  is left unchanged.
* Edited questions (an id already loaded, with another text now) follow ``[source]
  on_change``: ``refuse`` (the default) reads on to the end, then loads nothing and names the
  first few changed ids and their count; ``keep`` keeps the stored question and its answers;
  ``reask`` stores the new text and asks it again, the old answer kept as the version before
  with the text it answered (:func:`pipeline.store.versions.reask_edited`).
  :func:`load_source` / :func:`load_questions` commit per chunk, validating every row first
  and deleting their own rows on a conflict.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
from array import array
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import orjson
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.errors import GroundError
from pipeline.intake.files import file_records
from pipeline.intake.ids import InvalidId, checked_id
from pipeline.intake.query import query_records
from pipeline.job.sections import SourceSection
from pipeline.store import queue, versions
from pipeline.store.queue import Fingerprint, save_fingerprint, stored_fingerprint

__all__ = [
    "LoadError",
    "LoadResult",
    "SourceUnavailable",
    "load_records",
    "load_source",
    "read_rows",
]

CHUNK_ROWS = 1_000  # rows per insert; bounds memory and statement size
LOUD_BYTES = 4_000_000  # a question file this large says where its load stands (~50,000 rows)
PROGRESS_ROWS = 50_000  # ... every this many rows stored
NAMED_EDITS = 5  # changed ids a refused load names (the count says how many more)
# Characters, the class column's width (questions.qclass). A longer class is refused with its
# row, on every backend: PostgreSQL would refuse it mid-load, SQLite would keep it whole, and
# cutting it short could merge two classes and break `--class` filters.
MAX_CLASS_LENGTH = 200


class LoadError(GroundError, ValueError):
    """Questions that cannot be loaded; the message names ``file:line``. Only an edit of the
    input (or of the job file) cures it: ``ground`` exits 2."""


class SourceUnavailable(LoadError):
    """The ``[source] query``'s database could not be connected to or the query failed: a
    retry may cure it (``ground`` exits 1)."""


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
    # The file is unchanged since the job's last complete load: not read; ``existing`` is
    # that load's count.
    skipped: bool = False
    # Questions already loaded whose text changed (counted in ``existing``), and what was done
    # with them ([source] on_change: "keep" or "reask").
    edited: int = 0
    on_change: str = "refuse"

    @property
    def total(self) -> int:
        return self.added + self.existing


def read_rows(path: Path, source: SourceSection) -> Iterator[Row]:
    """Yield validated rows from a CSV or JSONL file, one at a time."""
    required = (source.id_field, source.text_field)
    records = file_records(
        path, source.format, required=required, error=LoadError, what="question file"
    )
    for line, record in records:
        yield _row(path, line, record, source)


def _row(path: Path | str, line: int, record: dict[str, Any], source: SourceSection) -> Row:
    try:
        qid = checked_id(record.get(source.id_field), source.id_field)
    except InvalidId as exc:
        raise LoadError(f"{path}:{line}: {exc}") from None
    text = record.get(source.text_field)
    if not isinstance(text, str) or not text.strip():
        raise LoadError(f"{path}:{line}: missing or empty text field {source.text_field!r}")
    qclass = None
    if source.class_field:
        value = record.get(source.class_field)
        qclass = None if value in (None, "") else str(value)
        if qclass is not None and len(qclass) > MAX_CLASS_LENGTH:
            raise LoadError(
                f"{path}:{line}: class field {source.class_field!r} is longer than"
                f" {MAX_CLASS_LENGTH} characters ({len(qclass)})"
            )
    meta = {k: record[k] for k in source.metadata_fields if k in record} or None
    # One rule for both backends: PostgreSQL cannot store NUL in text, SQLite can; such a row
    # is refused here, with its line, rather than mid-run on one backend only.
    if "\x00" in qid or "\x00" in text or (qclass is not None and "\x00" in qclass):
        raise LoadError(f"{path}:{line}: a NUL character (\\u0000) in the id, text or class")
    return Row(line, qid, text, qclass, meta)


async def load_questions(
    engine: AsyncEngine,
    job_id: int,
    path: Path,
    source: SourceSection,
    *,
    max_chars: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> LoadResult:
    """Insert the file's new questions, committed per chunk, all or nothing for a bad row.
    ``progress`` is told where a large file's load stands (:data:`LOUD_BYTES` and up): when
    it starts, when every row is checked, and every :data:`PROGRESS_ROWS` rows stored.

    The job's row must be committed already (:func:`pipeline.store.queue.ensure_job` in its
    own transaction). How a bad row still leaves nothing loaded:

    1. an unchanged file (same size and mtime, or else the same content digest, and the same
       settings) is not read at all;
    2. a first, pure streaming pass (in a thread) validates every row: its JSON or CSV, id,
       text, NUL characters and length. A malformed row is refused before anything is written;
    3. a second pass inserts chunks of :data:`CHUNK_ROWS`, one committed transaction each
       (``INSERT ... ON CONFLICT DO NOTHING RETURNING``), the text compared only for the
       conflicts. The row ids it inserted are kept (8 bytes each); an id already loaded with a
       different text (by an earlier load or earlier in this file) deletes those rows again
       before the error is raised, so the database is as it was;
    4. the fingerprint is stored once every row is in: a load that died part-way is read
       again by the next run, which completes it (idempotent on the id).

    Between 3's first commit and a failure's clean-up, another worker on the same job could
    see (and claim) the new rows: a load that fails on a conflict is rare, and is the user's
    to fix before running again.
    """
    settings = _settings_digest(source, max_chars)
    async with engine.begin() as connection:
        current, stored = await _check_fingerprint(connection, job_id, path, settings)
    if current is None:
        return LoadResult(0, stored.rows if stored else 0, skipped=True)
    tell = progress if current.size >= LOUD_BYTES else None
    if tell is not None:
        tell(
            f"loading {path.name} ({current.size / 1e6:.1f} MB): every row is checked first,"
            " then stored"
        )
    count = await anyio.to_thread.run_sync(_validate_file, path, source, max_chars)
    if tell is not None:
        tell(f"loading {path.name}: {count:,} rows checked; storing them")
    sink = _Committed(engine, job_id, path, source.on_change, tell=tell, rows=count)
    result = await sink.load(_async(read_rows(path, source)), max_chars)
    async with engine.begin() as connection:
        await save_fingerprint(connection, job_id, replace(current, rows=result.total))
    return result


async def load_source(
    engine: AsyncEngine,
    job_id: int,
    source: SourceSection,
    path: Path,
    *,
    max_chars: int,
    progress: Callable[[str], None] | None = None,
) -> LoadResult:
    """Insert the job's new questions, from its file (``path``) or its query, committed per
    chunk (see :func:`load_questions`, and ``progress`` there); a query is read twice, once to
    validate every row."""
    if not source.query:
        return await load_questions(
            engine, job_id, path, source, max_chars=max_chars, progress=progress
        )
    async for row in read_query_rows(source):
        _check_length(QUERY_LABEL, row, max_chars)
    sink = _Committed(engine, job_id, QUERY_LABEL, source.on_change)
    return await sink.load(read_query_rows(source), max_chars)


QUERY_LABEL = "[source] query row"
RECORDS_LABEL = "questions row"  # how a row of records in memory is named (1-based)


async def load_records(
    engine: AsyncEngine,
    job_id: int,
    records: Iterable[Mapping[str, Any]],
    source: SourceSection,
    *,
    max_chars: int | None,
) -> LoadResult:
    """Insert new questions from ``records`` in memory (a frame's rows, dicts), under the
    file's rules: the same fields, checks, idempotence on the id and ``on_change``, all or
    nothing for a bad row (every row is checked before the first is written). No fingerprint:
    the records are always read."""
    rows = await anyio.to_thread.run_sync(_validated_records, records, source, max_chars)
    sink = _Committed(engine, job_id, RECORDS_LABEL, source.on_change)
    return await sink.load(_async(iter(rows)), max_chars)


def _validated_records(
    records: Iterable[Mapping[str, Any]], source: SourceSection, max_chars: int | None
) -> list[Row]:
    rows = []
    for number, record in enumerate(records, 1):
        if not isinstance(record, Mapping):
            raise LoadError(
                f"{RECORDS_LABEL}:{number}: a {type(record).__name__}, not a mapping of fields"
            )
        row = _row(RECORDS_LABEL, number, dict(record), source)
        _check_length(RECORDS_LABEL, row, max_chars)
        rows.append(row)
    return rows


async def _async(rows: Iterator[Row]) -> AsyncIterator[Row]:
    for row in rows:
        yield row


async def read_query_rows(source: SourceSection) -> AsyncIterator[Row]:
    """Yield validated rows from ``source.query`` on ``source.url``, streamed in partitions."""
    records = query_records(
        source.query,
        source.url,
        section="source",
        required=(source.id_field, source.text_field),
        error=LoadError,
        unavailable=SourceUnavailable,
    )
    async for number, record in records:
        try:
            row = _row(QUERY_LABEL, number, record, source)
        except LoadError as exc:
            qid = record.get(source.id_field)
            raise LoadError(f"{exc} (id {qid!r})" if qid else str(exc)) from None
        yield row


def _check_length(path: Path | str, row: Row, max_chars: int | None) -> None:
    if max_chars is not None and len(row.text) > max_chars:
        # Refused here, with its line: sent, it would only come back as a 400 (too many
        # input tokens), or wait on a token quota it can never fit.
        raise LoadError(
            f"{path}:{row.line}: the question is {len(row.text):,} characters long, over"
            f" [limits] max_question_chars = {max_chars:,} (id {row.qid!r})"
        )


def _validate_file(path: Path, source: SourceSection, max_chars: int | None) -> int:
    """Read and check every row, keeping none (the committed load's first pass); the count."""
    count = 0
    for row in read_rows(path, source):
        _check_length(path, row, max_chars)
        count += 1
    return count


async def _insert_chunk(
    connection: AsyncConnection,
    job_id: int,
    path: Path | str,
    chunk: dict[str, Row],
    on_change: str,
    first_new: int | None,
) -> tuple[dict[str, int], list[Row]]:
    """Insert the chunk's new rows: those inserted (``qid -> row id``), and the rows whose id
    is already stored with another text (edited; with ``on_change = "reask"``, stored and
    queued to be asked again). An id this load inserted itself (row key ``first_new`` or
    later) with another text is the input's own contradiction: a :class:`LoadError`."""
    inserted = await queue.insert_new_questions(
        connection,
        job_id,
        [queue.NewQuestion(r.qid, r.text, r.qclass, r.meta) for r in chunk.values()],
    )
    conflicts = [qid for qid in chunk if qid not in inserted]
    stored = await queue.stored_questions(connection, job_id, conflicts)
    edited = []
    for qid in conflicts:
        row = chunk[qid]
        # None: the conflicting row went away since (a failed concurrent load took it back).
        row_id, text = stored.get(qid, (0, row.text))
        if text == row.text:
            continue
        if first_new is not None and row_id >= first_new:
            raise LoadError(
                f"{path}:{row.line}: id {qid!r} appears earlier in the input with different text"
            )
        edited.append(row)
    if edited and on_change == "reask":
        await versions.reask_edited(connection, job_id, [(r.qid, r.text) for r in edited])
    return inserted, edited


def _refused_edits(path: Path | str, count: int, named: list[Row]) -> LoadError:
    """The error of a load refused for edited questions: the first few, and how many."""
    ids = ", ".join(f"{row.qid!r} (line {row.line})" for row in named)
    more = f" and {count - len(named)} more" if count > len(named) else ""
    return LoadError(
        f"{path}: {count} question{'s' if count != 1 else ''} already loaded"
        f" {'have' if count != 1 else 'has'} different text now: {ids}{more};"
        ' set [source] on_change = "keep" (keep their answers) or "reask" (ask them again)'
    )


@dataclass(slots=True)
class _Committed:
    """Chunks committed one by one; a bad row deletes the rows this load inserted."""

    engine: AsyncEngine
    job_id: int
    path: Path | str
    on_change: str = "refuse"
    inserted: array[int] = field(default_factory=lambda: array("q"))
    edited: int = 0
    named: list[Row] = field(default_factory=list)  # the first few edited rows
    tell: Callable[[str], None] | None = None  # told every PROGRESS_ROWS rows stored
    rows: int = 0  # the rows to store, as the check counted them
    stored: int = 0

    async def insert(self, chunk: dict[str, Row]) -> tuple[int, int]:
        async with self.engine.begin() as connection:
            first_new = self.inserted[0] if self.inserted else None
            inserted, edited = await _insert_chunk(
                connection, self.job_id, self.path, chunk, self.on_change, first_new
            )
        self.inserted.extend(inserted.values())
        self.edited += len(edited)
        self.named.extend(edited[: NAMED_EDITS - len(self.named)])
        before, self.stored = self.stored, self.stored + len(chunk)
        if self.tell is not None and self.stored // PROGRESS_ROWS > before // PROGRESS_ROWS:
            name = Path(self.path).name
            self.tell(f"loading {name}: {self.stored:,} of {self.rows:,} rows stored")
        return len(inserted), len(chunk) - len(inserted)

    async def load(self, rows: AsyncIterator[Row], max_chars: int | None) -> LoadResult:
        try:
            return await self._load_rows(rows, max_chars)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._take_back()
            raise

    async def _load_rows(self, rows: AsyncIterator[Row], max_chars: int | None) -> LoadResult:
        added = existing = 0
        chunk: dict[str, Row] = {}
        async for row in rows:
            _check_length(self.path, row, max_chars)
            earlier = chunk.get(row.qid)
            if earlier is not None:
                if earlier.text != row.text:
                    raise LoadError(
                        f"{self.path}:{row.line}: id {row.qid!r} already appears on line"
                        f" {earlier.line} with different text"
                    )
                continue
            chunk[row.qid] = row
            if len(chunk) >= CHUNK_ROWS:
                a, e = await self.insert(chunk)
                added, existing, chunk = added + a, existing + e, {}
        if chunk:
            a, e = await self.insert(chunk)
            added, existing = added + a, existing + e
        if self.edited and self.on_change == "refuse":
            raise _refused_edits(self.path, self.edited, self.named)
        return LoadResult(added, existing, edited=self.edited, on_change=self.on_change)

    async def _take_back(self) -> None:
        ids = self.inserted
        for start in range(0, len(ids), CHUNK_ROWS):
            async with self.engine.begin() as connection:
                await queue.delete_questions(connection, ids[start : start + CHUNK_ROWS])
        self.inserted = array("q")


def _settings_digest(source: SourceSection, max_chars: int | None) -> str:
    """What shapes the loaded rows besides the file's bytes: a change loads the file again."""
    shape = [
        source.format,
        source.id_field,
        source.text_field,
        source.class_field,
        list(source.metadata_fields),
        max_chars,
        # Only when set: the digests of the loads made before on_change existed stay valid.
        *([source.on_change] if source.on_change != "refuse" else []),
    ]
    return hashlib.blake2b(orjson.dumps(shape), digest_size=32).hexdigest()


def _file_digest(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=32)
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _stat(path: Path) -> os.stat_result:
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise LoadError(f"{path}: no such question file") from None
    if not stat_module.S_ISREG(stat.st_mode):
        kind = "a directory" if stat_module.S_ISDIR(stat.st_mode) else "not a regular file"
        raise LoadError(f"{path}: is {kind}, not a question file")
    return stat


async def _check_fingerprint(
    connection: AsyncConnection, job_id: int, path: Path, settings: str
) -> tuple[Fingerprint | None, Fingerprint | None]:
    """``(current, stored)``; ``current`` is None when the file is unchanged since the job's
    last complete load (size and mtime equal, or else the content's digest equal, with the same
    path and settings), and is the fingerprint to store after loading it otherwise."""
    stat = _stat(path)
    stored = await stored_fingerprint(connection, job_id)
    same_shape = (
        stored is not None
        and stored.path == str(path)
        and stored.settings == settings
        and stored.size == stat.st_size
    )
    if same_shape and stored is not None and stored.mtime_ns == stat.st_mtime_ns:
        return None, stored  # like make and git: same size and mtime, not read
    digest = await anyio.to_thread.run_sync(_file_digest, path)
    current = Fingerprint(str(path), stat.st_size, stat.st_mtime_ns, digest, settings)
    if same_shape and stored is not None and stored.digest == digest:
        # Touched or copied, not changed: remember the new mtime, read nothing.
        await save_fingerprint(connection, job_id, replace(current, rows=stored.rows))
        return None, stored
    return current, stored
