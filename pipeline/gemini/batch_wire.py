"""The Batch API's documents, pure (no network): the JSONL input file, the batch as the API
describes it, and the result file's lines. :mod:`pipeline.gemini.batch` carries them.

* The input file: one ``{"key": ..., "request": ...}`` line per request
  (:func:`request_line`), split by :class:`PartWriter` into parts under
  :data:`MAX_PART_BYTES` and :data:`MAX_PART_REQUESTS` (the file limit is 2 GB, a third-party
  figure: ``docs/batch-and-limits.md`` "Size limits"); each part becomes one batch.
* The batch: an Operation whose ``metadata`` is the batch (:func:`parse_batch` ->
  :class:`BatchJob`). The Developer API names states ``BATCH_STATE_*``; python-genai maps them
  to ``JOB_STATE_*`` (``_transformers.py`` ``t_job_state``), and so does :func:`job_state`.
* The result file: each line is ``{"key", "response"}`` or ``{"key", "error"|"status"}``
  (:func:`parse_result_line`); a failed row's ``google.rpc.Status`` becomes the error the same
  failure would have raised online (:func:`status_error`). A SUCCEEDED batch can hold failed
  rows (``docs/batch-and-limits.md`` "Failed rows").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from pipeline.gemini.api_errors import GeminiError, ProtocolError, classify_http_error
from pipeline.redaction import redact

__all__ = [
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
    "JOB_STATE_SUCCEEDED",
    "TERMINAL_JOB_STATES",
    "BatchJob",
    "PartWriter",
    "ResultLine",
    "UploadedFile",
]

MAX_PART_BYTES = 1_000_000_000  # bytes per JSONL part: half the 2 GB file limit
MAX_PART_REQUESTS = 50_000  # requests per part (one batch each): keeps a lost batch small

# The batch states (google-genai's JobState names). PENDING and RUNNING are the live ones.
JOB_STATE_PENDING = "JOB_STATE_PENDING"
JOB_STATE_RUNNING = "JOB_STATE_RUNNING"
JOB_STATE_SUCCEEDED = "JOB_STATE_SUCCEEDED"
JOB_STATE_FAILED = "JOB_STATE_FAILED"
JOB_STATE_CANCELLED = "JOB_STATE_CANCELLED"
JOB_STATE_EXPIRED = "JOB_STATE_EXPIRED"
JOB_STATE_PARTIALLY_SUCCEEDED = "JOB_STATE_PARTIALLY_SUCCEEDED"  # Vertex: some rows failed
JOB_STATE_UNSPECIFIED = "JOB_STATE_UNSPECIFIED"
# The SDK's poll loop also stops on PAUSED; treated as finished
# (``docs/batch-and-limits.md`` "Batch states").
TERMINAL_JOB_STATES = frozenset(
    {
        JOB_STATE_SUCCEEDED,
        JOB_STATE_FAILED,
        JOB_STATE_CANCELLED,
        JOB_STATE_EXPIRED,
        "JOB_STATE_PAUSED",
        JOB_STATE_PARTIALLY_SUCCEEDED,
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
    """One JSONL file written by :class:`PartWriter`: its path, keys (in order) and size."""

    path: Path
    keys: list[str] = field(default_factory=list)
    size: int = 0


LineEncoder = Callable[[str, bytes], bytes]  # (key, request body) -> one JSONL line


class PartWriter:
    """Writes ``(key, request body)`` pairs as JSONL files in ``directory``, starting a new
    part before one would exceed ``max_bytes`` or ``max_requests``; one line in memory at a
    time. A single line larger than ``max_bytes`` raises ``ValueError`` (no part takes it).

    ``encode`` makes each line: :func:`request_line` (Developer API) by default, or
    :func:`pipeline.gemini.vertex_batch_wire.request_line` (Vertex batch prediction)."""

    def __init__(
        self,
        directory: Path,
        *,
        stem: str = "batch",
        max_bytes: int = MAX_PART_BYTES,
        max_requests: int = MAX_PART_REQUESTS,
        encode: LineEncoder = request_line,
    ) -> None:
        self.parts: list[Part] = []
        self._directory = directory
        self._stem = stem
        self._max_bytes = max_bytes
        self._max_requests = max_requests
        self._encode = encode
        self._handle: BinaryIO | None = None

    def add(self, key: str, body: bytes) -> None:
        line = self._encode(key, body)
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


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """Where an upload put a batch's input: ``files/{id}`` (the Files API) or
    ``gs://bucket/object`` (Cloud Storage, for Vertex), with the content's base64 MD5 when the
    store reports one (Cloud Storage's ``md5Hash``)."""

    name: str
    md5: str | None = None


# --- the batch, as the API describes it -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchJob:
    """A batch as ``create``/``get``/``list`` return it (the Operation's ``metadata``), or a
    Vertex ``BatchPredictionJob`` (:func:`pipeline.gemini.vertex_batch_wire.parse_prediction_job`).
    """

    name: str  # batches/{id}; Vertex: projects/{p}/locations/{l}/batchPredictionJobs/{id}
    state: str  # JOB_STATE_*
    display_name: str = ""
    model: str = ""
    create_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    # files/{id}, once SUCCEEDED; Vertex: outputInfo.gcsOutputDirectory (gs://...)
    responses_file: str | None = None
    request_count: int | None = None  # batchStats / completionStats, when the server sends them
    failed_count: int | None = None
    error: str | None = None  # the Operation's (job's) error message, when it failed
    labels: Mapping[str, str] = field(default_factory=dict)  # Vertex job labels
    # Vertex: outputConfig.gcsDestination.outputUriPrefix (where the job writes, chosen at create)
    output_uri_prefix: str | None = None

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


def _json_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def parse_batch(document: Any) -> BatchJob:
    """An Operation (``{"name", "metadata": {...}, "done", "error"}``) or a bare batch -> a
    :class:`BatchJob`. Raises :class:`ProtocolError` when it names no batch."""
    if not isinstance(document, dict):
        raise ProtocolError("a batch answer that is not a JSON object")
    meta = document.get("metadata")
    batch = meta if isinstance(meta, dict) else document
    name = document.get("name") or batch.get("name")
    if not isinstance(name, str) or not name:
        raise ProtocolError("a batch answer without a name")
    output = _json_object(batch.get("output"))
    response = _json_object(document.get("response"))
    stats = _json_object(batch.get("batchStats"))
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
        error=redact(str(error.get("message") or error)) if isinstance(error, dict) else None,
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
    """Decode one result line. Raises :class:`ProtocolError` for a line that is not a
    JSON object with a key."""
    try:
        document = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise ProtocolError("a result line that is not JSON") from None
    if not isinstance(document, dict) or "key" not in document:
        raise ProtocolError("a result line without a key")
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
