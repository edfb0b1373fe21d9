"""The documents of ``[retrieval]``: read from a JSONL or CSV file or a SQL query, streamed.

Fields (columns): ``id`` (the key), ``title``, ``uri``, ``text``; every other field is kept
as the document's metadata. A bad row is named as ``file:line`` (or the query's row number)
with the reason, as the question loader names its rows. Each document carries the hash of
what shapes its chunks (its text, title, uri, metadata and the chunk settings), so a changed
document is chunked again and an unchanged one is left alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from pipeline.errors import GroundError
from pipeline.intake.files import file_records
from pipeline.intake.ids import InvalidId, checked_id
from pipeline.intake.query import query_records

__all__ = [
    "DocumentError",
    "SourceDocument",
    "content_hash",
    "read_document_file",
    "read_document_query",
]

_KNOWN = ("id", "title", "uri", "text")


class DocumentError(GroundError, ValueError):
    """A document that cannot be loaded; the message names the place and the reason."""


@dataclass(frozen=True, slots=True)
class SourceDocument:
    line: int
    doc_id: str
    title: str | None
    uri: str | None
    text: str
    meta: dict[str, Any] | None


def content_hash(doc: SourceDocument, chunk_chars: int, chunk_overlap: int) -> str:
    shape = [doc.text, doc.title, doc.uri, doc.meta, chunk_chars, chunk_overlap]
    encoded = orjson.dumps(shape, option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.blake2b(encoded, digest_size=32).hexdigest()


def _optional_text(where: str, record: dict[str, Any], field: str) -> str | None:
    value = record.get(field)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise DocumentError(f"{where}: field {field!r} must be text")
    return value


def _document(where: str, line: int, record: dict[str, Any]) -> SourceDocument:
    try:
        doc_id = checked_id(record.get("id"), "id")
    except InvalidId as exc:
        raise DocumentError(f"{where}: {exc}") from None
    text = record.get("text")
    if not isinstance(text, str) or not text.strip():
        raise DocumentError(f"{where}: missing or empty text field 'text'")
    title = _optional_text(where, record, "title")
    uri = _optional_text(where, record, "uri")
    meta = {k: v for k, v in record.items() if k not in _KNOWN} or None
    if any("\x00" in (v or "") for v in (doc_id, text, title, uri)):
        # PostgreSQL cannot store NUL in text: refused on both backends alike.
        raise DocumentError(f"{where}: a NUL character (\\u0000) in the id, title, uri or text")
    return SourceDocument(line, doc_id, title, uri, text, meta)


def read_document_file(path: Path, fmt: str = "auto") -> Iterator[SourceDocument]:
    """Yield the file's documents one at a time (JSONL, or CSV with a header row)."""
    records = file_records(
        path, fmt, required=("id", "text"), error=DocumentError, what="documents file"
    )
    for line, record in records:
        yield _document(f"{path}:{line}", line, record)


async def read_document_query(query: str, url: str) -> AsyncIterator[SourceDocument]:
    """Yield the documents a SELECT returns, streamed through a server-side cursor."""
    records = query_records(
        query, url, section="retrieval", required=("id", "text"), error=DocumentError
    )
    async for number, record in records:
        yield _document(f"[retrieval] query row {number}", number, record)
