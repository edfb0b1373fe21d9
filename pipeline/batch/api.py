"""The seam between batch mode and a Batch API: the verbs the runner, submission and
collection use, whatever serves them.

The Developer API's Batch and Files API (:class:`pipeline.gemini.batch.BatchClient`) is one;
Vertex AI batch prediction over Cloud Storage is another. Each answers in the same shapes
(:class:`~pipeline.gemini.batch_wire.BatchJob`, result lines keyed by question), so nothing
else in batch mode knows which one it talks to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

from pipeline.gemini.batch_wire import BatchJob


class BatchApi(Protocol):
    """What batch mode asks of a Batch API (used as an async context manager)."""

    async def upload(self, path: Path, *, display_name: str) -> str:
        """Upload a JSONL input file; the name ``create`` takes."""
        ...

    async def create(self, model: str, file_name: str, *, display_name: str) -> BatchJob:
        """Create a batch over an uploaded file."""
        ...

    async def find(self, display_name: str) -> BatchJob | None:
        """The batch called ``display_name``, if one exists (a create whose answer was lost)."""
        ...

    async def get(self, name: str) -> BatchJob: ...

    async def cancel(self, name: str) -> None: ...

    def download_lines(self, file_name: str) -> AsyncIterator[bytes]:
        """The result file's lines, streamed."""
        ...
