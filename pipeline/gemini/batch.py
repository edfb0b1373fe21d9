"""The Gemini Batch API edge (Developer API, file mode), taking plain values only.

Batch mode sends the same ``GenerateContentRequest`` bodies as online calls, as a JSONL file
with one ``{"key": ..., "request": ...}`` per line, at half the token price (reference §7.1;
https://ai.google.dev/gemini-api/docs/batch-mode). The steps, each one HTTP exchange here:

1. :func:`request_line` / :func:`write_parts`: the JSONL lines, split into parts under
   :data:`MAX_PART_BYTES` (the file limit is 2 GB, a third-party figure: reference §2.2 of
   batch-anchors.md); each part becomes one batch.
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
   (``_transformers.py`` ``t_job_state``), and so does :func:`job_state`.
5. :meth:`BatchClient.download_lines`: the result file
   (``metadata.output.responsesFile``), ``GET /download/v1beta/{file}:download?alt=media``
   (the batch-mode docs' REST sample), streamed line by line: memory stays flat whatever the
   file's size. Each line is ``{"key", "response"}`` or ``{"key", "error"|"status"}``; a
   SUCCEEDED batch can hold failed rows (batch-anchors.md §2.2).

Inline mode is not offered: inline responses come back out of order and without their keys
(python-genai #1909, #1886). Errors are the HTTP tree of :mod:`pipeline.gemini.errors` plus
:class:`BatchProtocolError`. Credentials stay in headers: never in a URL, a message or a log.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Self
from urllib.parse import quote

import aiohttp
import anyio
import orjson

from pipeline.errors import ErrorClass
from pipeline.gemini.endpoint import DEVELOPER_API_BASE, Auth
from pipeline.gemini.errors import (
    GeminiError,
    PermanentError,
    TransientError,
    Unreachable,
    classify_http_error,
)

API_VERSION = "v1beta"
MAX_PART_BYTES = 1_000_000_000  # bytes per JSONL part: half the 2 GB file limit
MAX_PART_REQUESTS = 50_000  # requests per part (one batch each): keeps a lost batch small
UPLOAD_CHUNK_BYTES = 8 * 1024 * 1024  # bytes per resumable-upload request
DOWNLOAD_READ_BYTES = 1024 * 1024  # bytes read from the result stream at a time
MAX_LINE_BYTES = 64 * 1024 * 1024  # a result line longer than this is refused as hostile
CONNECT_TIMEOUT_S = 10.0  # seconds
REQUEST_TIMEOUT_S = 300.0  # seconds for one upload chunk, create, get, list or cancel
JSONL_MIME = "application/jsonl"
USER_AGENT = "ground/0.1 (+aiohttp; batch)"

# The batch states (google-genai's JobState names). PENDING and RUNNING are the live ones.
JOB_STATE_PENDING = "JOB_STATE_PENDING"
JOB_STATE_RUNNING = "JOB_STATE_RUNNING"
JOB_STATE_SUCCEEDED = "JOB_STATE_SUCCEEDED"
JOB_STATE_FAILED = "JOB_STATE_FAILED"
JOB_STATE_CANCELLED = "JOB_STATE_CANCELLED"
JOB_STATE_EXPIRED = "JOB_STATE_EXPIRED"
JOB_STATE_UNSPECIFIED = "JOB_STATE_UNSPECIFIED"
# The SDK's poll loop also stops on PAUSED (batch-anchors.md §2.2); treated as finished.
TERMINAL_JOB_STATES = frozenset(
    {
        JOB_STATE_SUCCEEDED,
        JOB_STATE_FAILED,
        JOB_STATE_CANCELLED,
        JOB_STATE_EXPIRED,
        "JOB_STATE_PAUSED",
        "JOB_STATE_PARTIALLY_SUCCEEDED",
    }
)

# google.rpc.Code -> the HTTP status Google maps it to (google/rpc/code.proto).
_GRPC_TO_HTTP = {
    1: 499,
    2: 500,
    3: 400,
    4: 504,
    5: 404,
    6: 409,
    7: 403,
    8: 429,
    9: 400,
    10: 409,
    11: 400,
    12: 501,
    13: 500,
    14: 503,
    15: 500,
    16: 401,
}


class BatchProtocolError(PermanentError):
    """The server answered 2xx with something the Batch API does not send (no upload URL, a
    batch without a name, a result line that is not JSON)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_class=ErrorClass.MALFORMED_RESPONSE)


def job_state(state: str | None) -> str:
    """``BATCH_STATE_X`` (Developer API) or ``JOB_STATE_X`` -> ``JOB_STATE_X``."""
    if not state:
        return JOB_STATE_UNSPECIFIED
    if state.startswith("BATCH_STATE_"):
        return "JOB_STATE_" + state.removeprefix("BATCH_STATE_")
    return state


# --- the input file --------------------------------------------------------------------------


def request_line(key: str, body: bytes) -> bytes:
    """One JSONL line: ``{"key": key, "request": body}`` + newline.

    ``body`` is a ``GenerateContentRequest`` as :class:`~pipeline.gemini.request.
    GroundedRequestBuilder` encodes it; it is spliced in as is, never decoded again.
    """
    return b'{"key":' + orjson.dumps(key) + b',"request":' + body + b"}\n"


@dataclass(slots=True)
class Part:
    """One JSONL file written by :func:`write_parts`: its path, keys (in order) and size."""

    path: Path
    keys: list[str] = field(default_factory=list)
    size: int = 0


class PartWriter:
    """Writes ``(key, request body)`` pairs as JSONL files in ``directory``, starting a new
    part before one would exceed ``max_bytes`` or ``max_requests``; one line in memory at a
    time. A single line larger than ``max_bytes`` raises ``ValueError`` (no part takes it)."""

    def __init__(
        self,
        directory: Path,
        *,
        stem: str = "batch",
        max_bytes: int = MAX_PART_BYTES,
        max_requests: int = MAX_PART_REQUESTS,
    ) -> None:
        self.parts: list[Part] = []
        self._directory = directory
        self._stem = stem
        self._max_bytes = max_bytes
        self._max_requests = max_requests
        self._handle: BinaryIO | None = None

    def add(self, key: str, body: bytes) -> None:
        line = request_line(key, body)
        if len(line) > self._max_bytes:
            raise ValueError(f"request {key!r} is {len(line)} bytes, over {self._max_bytes}")
        current = self.parts[-1] if self.parts else None
        if (
            current is None
            or current.size + len(line) > self._max_bytes
            or len(current.keys) >= self._max_requests
        ):
            self._close_file()
            current = Part(self._directory / f"{self._stem}-{len(self.parts):04d}.jsonl")
            self.parts.append(current)
            self._handle = current.path.open("wb")
        assert self._handle is not None
        self._handle.write(line)
        current.keys.append(key)
        current.size += len(line)

    def close(self) -> list[Part]:
        self._close_file()
        return self.parts

    def _close_file(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def write_parts(
    lines: Iterable[tuple[str, bytes]],
    directory: Path,
    *,
    stem: str = "batch",
    max_bytes: int = MAX_PART_BYTES,
    max_requests: int = MAX_PART_REQUESTS,
) -> list[Part]:
    """All of ``lines`` through a :class:`PartWriter`; the parts written."""
    writer = PartWriter(directory, stem=stem, max_bytes=max_bytes, max_requests=max_requests)
    try:
        for key, body in lines:
            writer.add(key, body)
    finally:
        writer.close()
    return writer.parts


# --- the batch, as the API describes it -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchJob:
    """A batch as ``create``/``get``/``list`` return it (the Operation's ``metadata``)."""

    name: str  # batches/{id}
    state: str  # JOB_STATE_*
    display_name: str = ""
    model: str = ""
    create_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    responses_file: str | None = None  # files/{id}, once SUCCEEDED
    request_count: int | None = None  # batchStats, when the server sends them
    failed_count: int | None = None
    error: str | None = None  # the Operation's error message, when it failed

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_JOB_STATES


def _timestamp(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    text = value.rstrip("Z")
    if "." in text:  # RFC 3339 with up to 9 fractional digits; Python takes 6
        head, _, frac = text.partition(".")
        text = f"{head}.{frac[:6]}"
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def parse_batch(document: Any) -> BatchJob:
    """An Operation (``{"name", "metadata": {...}, "done", "error"}``) or a bare batch -> a
    :class:`BatchJob`. Raises :class:`BatchProtocolError` when it names no batch."""
    if not isinstance(document, dict):
        raise BatchProtocolError("a batch answer that is not a JSON object")
    meta = document.get("metadata")
    batch = meta if isinstance(meta, dict) else document
    name = document.get("name") or batch.get("name")
    if not isinstance(name, str) or not name:
        raise BatchProtocolError("a batch answer without a name")
    output = batch.get("output") if isinstance(batch.get("output"), dict) else {}
    response = document.get("response") if isinstance(document.get("response"), dict) else {}
    stats = batch.get("batchStats") if isinstance(batch.get("batchStats"), dict) else {}
    error = document.get("error")
    return BatchJob(
        name=name,
        state=job_state(batch.get("state")),
        display_name=str(batch.get("displayName") or ""),
        model=str(batch.get("model") or ""),
        create_time=_timestamp(batch.get("createTime")),
        end_time=_timestamp(batch.get("endTime")),
        responses_file=output.get("responsesFile") or response.get("responsesFile"),
        request_count=_int(stats.get("requestCount")),
        failed_count=_int(stats.get("failedRequestCount")),
        error=str(error.get("message") or error) if isinstance(error, dict) else None,
    )


# --- the result file --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResultLine:
    """One line of a result file: the response (its JSON, re-encoded compactly) or an error.

    ``error`` is the :class:`GeminiError` the same failure would have raised online (a
    ``google.rpc.Status`` code mapped to its HTTP status), so the retry policy judges it alike.
    """

    key: str
    response: bytes | None = None
    error: GeminiError | None = None


def parse_result_line(line: bytes) -> ResultLine:
    """Decode one result line. Raises :class:`BatchProtocolError` for a line that is not a
    JSON object with a key."""
    try:
        document = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise BatchProtocolError("a result line that is not JSON") from None
    if not isinstance(document, dict) or "key" not in document:
        raise BatchProtocolError("a result line without a key")
    key = str(document["key"])
    response = document.get("response")
    if isinstance(response, dict):
        return ResultLine(key, response=orjson.dumps(response))
    status = document.get("error") or document.get("status") or {}
    if not isinstance(status, dict):
        status = {"message": str(status)}
    return ResultLine(key, error=status_error(status))


def status_error(status: dict[str, Any]) -> GeminiError:
    """A ``google.rpc.Status`` (``{"code", "message", "details"}``) as the API-edge error the
    same failure would raise online."""
    code = _int(status.get("code")) or 2
    http = _GRPC_TO_HTTP.get(code, 500)
    body = {"error": {"code": http, **{k: v for k, v in status.items() if k != "code"}}}
    body["error"].setdefault("message", "failed row")
    return classify_http_error(http, orjson.dumps(body))


# --- the client -------------------------------------------------------------------------------


class BatchClient:
    """The Batch and Files API of one Developer API base URL, over its own aiohttp session.

    Use as an async context manager. Nothing here retries: the runner decides (polling with
    backoff, a failed upload started again).
    """

    __slots__ = ("_auth", "_base", "_session")

    def __init__(self, auth: Auth, *, base_url: str | None = None) -> None:
        self._auth = auth
        self._base = (base_url or DEVELOPER_API_BASE).rstrip("/")
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            headers={"user-agent": USER_AGENT},
            raise_for_status=False,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._session.close()

    # -- files ---------------------------------------------------------------------------------

    async def upload(self, path: Path, *, display_name: str) -> str:
        """Upload ``path`` with the resumable protocol; the file's name (``files/...``)."""
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
        _, raw, answer = await self._request("POST", url, body=body, headers=headers)
        upload_url = answer.get("x-goog-upload-url")
        if not upload_url:
            raise BatchProtocolError("the upload start answered without X-Goog-Upload-URL")
        offset = 0
        async with await anyio.open_file(path, "rb") as handle:
            while True:
                chunk = await handle.read(UPLOAD_CHUNK_BYTES)
                last = offset + len(chunk) >= size
                command = "upload, finalize" if last else "upload"
                _, raw, answer = await self._request(
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
                if answer.get("x-goog-upload-status") != "active":
                    raise BatchProtocolError("the upload was interrupted by the server")
        if answer.get("x-goog-upload-status") != "final":
            raise BatchProtocolError("the upload did not end with X-Goog-Upload-Status: final")
        document = _json(raw)
        file = document.get("file") if isinstance(document, dict) else None
        name = file.get("name") if isinstance(file, dict) else None
        if not isinstance(name, str) or not name.startswith("files/"):
            raise BatchProtocolError("the finalized upload names no file")
        return name

    async def download_lines(self, file_name: str) -> AsyncIterator[bytes]:
        """The lines of a result file (``files/...``), one at a time, without the newline."""
        url = f"{self._base}/download/{API_VERSION}/{_path(file_name)}:download?alt=media"
        headers = dict(await self._auth.headers())
        try:
            async with self._session.get(url, headers=headers) as resp:
                if not 200 <= resp.status < 300:
                    raise classify_http_error(resp.status, await resp.content.read(16 * 1024))
                pending = b""
                async for chunk in resp.content.iter_chunked(DOWNLOAD_READ_BYTES):
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        if line.strip():
                            yield line
                    if len(pending) > MAX_LINE_BYTES:
                        raise BatchProtocolError(f"a result line over {MAX_LINE_BYTES} bytes")
                if pending.strip():
                    yield pending
        except aiohttp.ClientConnectorError as exc:
            raise Unreachable(f"cannot connect to the Files API: {exc.os_error}") from None
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            raise TransientError(
                f"the result download broke off: {type(exc).__name__}",
                error_class=ErrorClass.TRUNCATED,
            ) from None
        except TimeoutError:
            raise TransientError(
                "the result download timed out", error_class=ErrorClass.TIMEOUT
            ) from None

    # -- batches -------------------------------------------------------------------------------

    async def create(self, model: str, file_name: str, *, display_name: str) -> BatchJob:
        """Create a batch over an uploaded file; the batch as the server describes it."""
        url = f"{self._base}/{API_VERSION}/models/{quote(model, safe='.-_')}:batchGenerateContent"
        body = orjson.dumps(
            {"batch": {"displayName": display_name, "inputConfig": {"fileName": file_name}}}
        )
        _, raw, _ = await self._request(
            "POST", url, body=body, headers={"content-type": "application/json"}
        )
        return parse_batch(_json(raw))

    async def get(self, name: str) -> BatchJob:
        _, raw, _ = await self._request("GET", f"{self._base}/{API_VERSION}/{_path(name)}")
        return parse_batch(_json(raw))

    async def cancel(self, name: str) -> None:
        url = f"{self._base}/{API_VERSION}/{_path(name)}:cancel"
        await self._request("POST", url, body=b"{}", headers={"content-type": "application/json"})

    async def list(self, *, page_size: int = 100) -> AsyncIterator[BatchJob]:
        """Every batch of the project, page by page (newest first, as the server orders)."""
        token = ""
        while True:
            url = f"{self._base}/{API_VERSION}/batches?pageSize={page_size}"
            if token:
                url += f"&pageToken={quote(token)}"
            _, raw, _ = await self._request("GET", url)
            document = _json(raw)
            for operation in document.get("operations") or ():
                yield parse_batch(operation)
            token = document.get("nextPageToken") or ""
            if not token:
                return

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
    ) -> tuple[int, bytes, dict[str, str]]:
        merged = dict(await self._auth.headers())
        merged.update(headers or {})
        try:
            async with self._session.request(method, url, data=body, headers=merged) as resp:
                raw = await resp.read()
                status = resp.status
                answer = {k.lower(): v for k, v in resp.headers.items()}
        except aiohttp.ClientConnectorError as exc:
            raise Unreachable(f"cannot connect to the Batch API: {exc.os_error}") from None
        except TimeoutError:
            raise TransientError(
                f"no answer within {REQUEST_TIMEOUT_S:g} s", error_class=ErrorClass.TIMEOUT
            ) from None
        except aiohttp.ClientError as exc:
            raise TransientError(
                f"connection failed: {type(exc).__name__}", error_class=ErrorClass.CONNECTION
            ) from None
        if not 200 <= status < 300:
            raise classify_http_error(status, raw)
        return status, raw, answer


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        raise BatchProtocolError("a 2xx answer that is not JSON") from None


def _path(name: str) -> str:
    """``batches/x`` / ``files/x`` as a URL path (each segment quoted)."""
    return "/".join(quote(segment, safe="-_.") for segment in name.split("/"))


def iter_keys(parts: Iterable[Part]) -> Iterator[str]:
    for part in parts:
        yield from part.keys
