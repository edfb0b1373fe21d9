"""What stored batches left in Cloud Storage, removed (``ground batch clean``).

A Vertex batch reads its input from an object and writes its results under a prefix of the
job's buckets (docs/vertex-batch.md); Vertex deletes neither. Once the batch is ``done`` (its
rows stored, or given back) both are of no further use to ``ground``: this removes the input
object and every object under the batch's output prefix, then records ``cleaned_at`` so
``ground status`` stops listing them. A batch still running is never touched. The Developer
API's uploads are not here: the Files API deletes them itself after 48 hours
(https://ai.google.dev/gemini-api/docs/files).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from pipeline.store import batches as store
from pipeline.store.database import Database

__all__ = [
    "clean_batches",
    "left_behind",
]

log = logging.getLogger(__name__)


class Bucket(Protocol):
    """The two Cloud Storage verbs cleaning needs (:class:`pipeline.gemini.vertex_batch.
    VertexBatchClient` has them)."""

    async def list_objects(self, prefix: str) -> list[str]:
        """Every object under ``prefix`` (``gs://bucket/dir``, as a directory)."""
        ...

    async def delete(self, uri: str) -> bool:
        """Remove one object; False when it was already gone."""
        ...


@dataclass(frozen=True, slots=True)
class Cleaned:
    """One batch cleaned: its display name and the objects removed."""

    display_name: str
    removed: tuple[str, ...]


def left_behind(row: store.BatchRow) -> tuple[str, ...]:
    """Where a batch's files lie in Cloud Storage, as ``ground status`` lists them: its input
    object and its output directory (Vertex's, once reported; else the prefix it was given),
    nothing once cleaned."""
    if row.cleaned_at is not None:
        return ()
    output = row.output_dir or row.output_uri_prefix
    return tuple(u for u in (row.input_uri, f"{output.rstrip('/')}/" if output else None) if u)


async def clean_batches(db: Database, job_id: int, bucket: Bucket) -> list[Cleaned]:
    """Remove what each of the job's ``done`` batches left in Cloud Storage, recording each
    one's ``cleaned_at`` as soon as its objects are gone (a rerun after a crash finds the
    rest, and deleting an object already gone is not an error)."""
    rows = await db.read("reading the stored batches", lambda c: store.left_in_bucket(c, job_id))
    cleaned: list[Cleaned] = []
    for row in rows:
        removed: list[str] = []
        if row.input_uri and await bucket.delete(row.input_uri):
            removed.append(row.input_uri)
        for prefix in dict.fromkeys(p for p in (row.output_uri_prefix, row.output_dir) if p):
            for uri in await bucket.list_objects(prefix):
                if await bucket.delete(uri):
                    removed.append(uri)
        await db.transaction(
            "recording a cleaned batch", lambda c, b=row.id: store.set_cleaned(c, b)
        )
        log.info(
            "batch %s: %d objects removed from Cloud Storage",
            row.display_name,
            len(removed),
            extra={"action": "batch_cleaned", "batch": row.name, "count": len(removed)},
        )
        cleaned.append(Cleaned(row.display_name, tuple(removed)))
    return cleaned
