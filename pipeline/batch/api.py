"""The seam between batch mode and a Batch API: the verbs the runner, submission and
collection use, whatever serves them.

The Developer API's Batch and Files API (:class:`pipeline.gemini.batch.BatchClient`) is one;
Vertex AI batch prediction over Cloud Storage (:class:`pipeline.gemini.vertex_batch.
VertexBatchClient`) is another. Each writes its own input lines and reads its own result
lines, and answers in the same shapes (:class:`~pipeline.gemini.batch_wire.BatchJob`,
:class:`~pipeline.gemini.batch_wire.ResultLine` keyed by question), so nothing else in batch
mode knows which one it talks to. (BigQuery input and output would be a third.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol, Self

from pipeline.gemini.batch_wire import BatchJob, ResultLine, UploadedFile

__all__ = [
    "BatchApi",
]


class BatchApi(Protocol):
    """What batch mode asks of a Batch API (used as an async context manager). Positional
    arguments are passed by position: each client names them in its own terms (a Files API
    name, a ``gs://`` URI)."""

    async def __aenter__(self) -> Self:
        """The client itself, for the calls below."""
        ...

    async def __aexit__(self, *exc_info: object) -> None:
        """Close the client's HTTP sessions."""
        ...

    def encode_line(self, key: str, body: bytes, /) -> bytes:
        """One input line for a request body (a ``GenerateContentRequest``) and its key."""
        ...

    def parse_line(self, line: bytes, /) -> ResultLine:
        """One result line, keyed by the key its request was sent with."""
        ...

    async def upload(self, path: Path, /, *, display_name: str) -> UploadedFile:
        """Upload a JSONL input file (not again when the same content is there); where it
        went, which ``create`` takes."""
        ...

    async def create(self, model: str, file_name: str, /, *, display_name: str) -> BatchJob:
        """Create a batch over an uploaded file."""
        ...

    async def find(self, display_name: str, /) -> BatchJob | None:
        """The batch called ``display_name``, if one exists (a create whose answer was lost)."""
        ...

    async def get(self, name: str, /) -> BatchJob: ...

    async def cancel(self, name: str, /) -> None: ...

    async def output_files(self, results: str, /) -> list[str]:
        """The result files a finished batch left at ``results`` (its
        :attr:`~pipeline.gemini.batch_wire.BatchJob.responses_file`), in the order they are
        read: a resumed download skips the lines already stored across them all."""
        ...

    def download_lines(self, file_name: str, /) -> AsyncIterator[bytes]:
        """A result file's lines, streamed."""
        ...
