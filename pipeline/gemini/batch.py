"""The Gemini Batch API edge (Developer API, file mode), taking plain values only: the HTTP
exchanges. The documents they carry (the input file's parts, the batch, the result lines) are
:mod:`pipeline.gemini.batch_wire`, pure.

Batch mode sends the same ``GenerateContentRequest`` bodies as online calls, as a JSONL file
with one ``{"key": ..., "request": ...}`` per line, at half the token price
(``docs/wire-format.md`` "Batch mode"; https://ai.google.dev/gemini-api/docs/batch-mode). The
steps, each one HTTP exchange here:

1. :class:`~pipeline.gemini.batch_wire.PartWriter`: the JSONL lines, split into parts under
   :data:`~pipeline.gemini.batch_wire.MAX_PART_BYTES` (the file limit is 2 GB, a third-party
   figure: ``docs/batch-and-limits.md`` "Size limits"); each part becomes one batch.
2. :meth:`BatchClient.upload`: the Files API's resumable upload, as google-genai does it
   (``google/genai/_extra_utils.py`` ``prepare_resumable_upload`` and
   ``_api_client.py`` ``_upload_fd``): ``POST /upload/v1beta/files`` with
   ``X-Goog-Upload-Protocol: resumable``, ``X-Goog-Upload-Command: start`` and
   ``X-Goog-Upload-Header-Content-Length/-Type``; the answer's ``X-Goog-Upload-URL`` header
   takes the bytes in chunks (``X-Goog-Upload-Command: upload``, ``X-Goog-Upload-Offset``), the
   last one with ``upload, finalize``; ``X-Goog-Upload-Status: final`` and ``{"file": ...}``.
3. :meth:`BatchClient.create`: ``POST /v1beta/models/{model}:batchGenerateContent`` with
   ``{"batch": {"displayName", "inputConfig": {"fileName"}}}`` (ai.google.dev/api/batch-mode;
   python-genai ``batches.py`` ``_BatchJobSource_to_mldev``). The answer is an Operation
   whose ``metadata`` is the batch.
4. :meth:`BatchClient.get` / :meth:`BatchClient.list` / :meth:`BatchClient.cancel`:
   ``GET /v1beta/batches/{id}``, ``GET /v1beta/batches``, ``POST /v1beta/batches/{id}:cancel``.
   The Developer API names states ``BATCH_STATE_*``; python-genai maps them to ``JOB_STATE_*``
   (``_transformers.py`` ``t_job_state``), and so does
   :func:`~pipeline.gemini.batch_wire.job_state`.
5. :meth:`BatchClient.download_lines`: the result file
   (``metadata.output.responsesFile``), ``GET /download/v1beta/{file}:download?alt=media``
   (the batch-mode docs' REST sample), streamed line by line: memory stays flat whatever the
   file's size. Each line is ``{"key", "response"}`` or ``{"key", "error"|"status"}``; a
   SUCCEEDED batch can hold failed rows (``docs/batch-and-limits.md`` "Failed rows").

Inline mode is not offered: inline responses come back out of order and without their keys
(python-genai #1909, #1886). Errors are the HTTP tree of :mod:`pipeline.gemini.api_errors` plus
:class:`~pipeline.gemini.batch_wire.ProtocolError`. Credentials stay in headers: never in
a URL, a message or a log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from urllib.parse import quote

import aiohttp
import anyio
import orjson

from pipeline.gemini.batch_wire import (
    BatchJob,
    ProtocolError,
    ResultLine,
    UploadedFile,
    parse_batch,
    parse_result_line,
    request_line,
)
from pipeline.gemini.endpoint import DEVELOPER_API_BASE, Auth
from pipeline.gemini.session import Exchange, SessionOwner, listed, resource_path

__all__ = [
    "BatchClient",
]

API_VERSION = "v1beta"
UPLOAD_CHUNK_BYTES = 8 * 1024 * 1024  # bytes per resumable-upload request
CONNECT_TIMEOUT_S = 10.0  # seconds
REQUEST_TIMEOUT_S = 300.0  # seconds for one upload chunk, create, get, list or cancel
JSONL_MIME = "application/jsonl"


class BatchClient(SessionOwner):
    """The Batch and Files API of one Developer API base URL, over its own aiohttp session.

    Use as an async context manager. Nothing here retries: the runner decides (polling with
    backoff, a failed upload started again).
    """

    __slots__ = ("_auth", "_base")

    def __init__(self, auth: Auth, *, base_url: str | None = None) -> None:
        self._auth = auth
        self._base = (base_url or DEVELOPER_API_BASE).rstrip("/")
        super().__init__(
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            service="the Batch API",
        )

    # -- the documents -------------------------------------------------------------------------

    def encode_line(self, key: str, body: bytes) -> bytes:
        """An input line, ``{"key", "request"}`` (:func:`.batch_wire.request_line`)."""
        return request_line(key, body)

    def parse_line(self, line: bytes) -> ResultLine:
        """A result line (:func:`~pipeline.gemini.batch_wire.parse_result_line`)."""
        return parse_result_line(line)

    # -- files ---------------------------------------------------------------------------------

    async def upload(self, path: Path, *, display_name: str) -> UploadedFile:
        """Upload ``path`` with the resumable protocol; the file (``files/...``)."""
        size = (await anyio.Path(path).stat()).st_size
        headers = {
            "content-type": "application/json",
            "x-goog-upload-protocol": "resumable",
            "x-goog-upload-command": "start",
            "x-goog-upload-header-content-length": str(size),
            "x-goog-upload-header-content-type": JSONL_MIME,
        }
        body = orjson.dumps({"file": {"displayName": display_name}})
        url = f"{self._base}/upload/{API_VERSION}/files"
        exchange = await self._request("POST", url, body=body, headers=headers)
        upload_url = exchange.headers.get("x-goog-upload-url")
        if not upload_url:
            raise ProtocolError("the upload start answered without X-Goog-Upload-URL")
        offset = 0
        async with await anyio.open_file(path, "rb") as handle:
            while True:
                chunk = await handle.read(UPLOAD_CHUNK_BYTES)
                last = offset + len(chunk) >= size
                command = "upload, finalize" if last else "upload"
                exchange = await self._request(
                    "POST",
                    upload_url,
                    body=chunk,
                    headers={
                        "x-goog-upload-command": command,
                        "x-goog-upload-offset": str(offset),
                        "content-type": JSONL_MIME,
                    },
                )
                offset += len(chunk)
                if last:
                    break
                if exchange.headers.get("x-goog-upload-status") != "active":
                    raise ProtocolError("the upload was interrupted by the server")
        if exchange.headers.get("x-goog-upload-status") != "final":
            raise ProtocolError("the upload did not end with X-Goog-Upload-Status: final")
        document = exchange.json()
        file = document.get("file") if isinstance(document, dict) else None
        name = file.get("name") if isinstance(file, dict) else None
        if not isinstance(name, str) or not name.startswith("files/"):
            raise ProtocolError("the finalized upload names no file")
        return UploadedFile(name)

    async def output_files(self, results: str) -> list[str]:
        """A finished batch's result files: its one ``responsesFile``."""
        return [results]

    async def download_lines(self, file_name: str) -> AsyncIterator[bytes]:
        """The lines of a result file (``files/...``), one at a time, without the newline."""
        url = f"{self._base}/download/{API_VERSION}/{resource_path(file_name)}:download?alt=media"
        async for line in self._lines(url, await self._auth.headers()):
            yield line

    # -- batches -------------------------------------------------------------------------------

    async def create(self, model: str, file_name: str, *, display_name: str) -> BatchJob:
        """Create a batch over an uploaded file; the batch as the server describes it."""
        url = f"{self._base}/{API_VERSION}/models/{quote(model, safe='.-_')}:batchGenerateContent"
        body = orjson.dumps(
            {"batch": {"displayName": display_name, "inputConfig": {"fileName": file_name}}}
        )
        exchange = await self._request(
            "POST", url, body=body, headers={"content-type": "application/json"}
        )
        return parse_batch(exchange.json())

    async def get(self, name: str) -> BatchJob:
        url = f"{self._base}/{API_VERSION}/{resource_path(name)}"
        exchange = await self._request("GET", url)
        return parse_batch(exchange.json())

    async def cancel(self, name: str) -> None:
        url = f"{self._base}/{API_VERSION}/{resource_path(name)}:cancel"
        await self._request("POST", url, body=b"{}", headers={"content-type": "application/json"})

    async def list(self, *, page_size: int = 100) -> AsyncIterator[BatchJob]:
        """Every batch of the project, page by page (newest first, as the server orders)."""
        url = f"{self._base}/{API_VERSION}/batches?pageSize={page_size}"
        async for operation in listed(partial(self._request, "GET"), url, "operations"):
            yield parse_batch(operation)

    async def find(self, display_name: str) -> BatchJob | None:
        """The batch called ``display_name``, if the server has one (a create whose answer
        was lost: the name is unique per batch we make, so at most one matches)."""
        async for job in self.list():
            if job.display_name == display_name:
                return job
        return None

    # -- one exchange ----------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Exchange:
        return await self._exchange(
            method, url, body=body, headers={**(await self._auth.headers()), **(headers or {})}
        )
