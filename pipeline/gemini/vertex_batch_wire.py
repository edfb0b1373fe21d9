"""Vertex AI batch prediction's documents, pure (no network): the JSONL input lines, the
``BatchPredictionJob`` resource, the output lines, and ``gs://`` URIs.
:mod:`pipeline.gemini.vertex_batch` carries them. Sources: docs/vertex-batch.md.

* Input line: ``{"request": GenerateContentRequest}``
  (https://cloud.google.com/vertex-ai/generative-ai/docs/multimodal/batch-prediction-from-cloud-storage).
  The key that joins an output line to its question goes *inside* the request, as the
  request's own ``labels`` map (Vertex ``GenerateContentRequest.labels``, googleapis
  ``google/cloud/aiplatform/v1/prediction_service.proto``), because Vertex echoes the request
  in each output line and has no key field of its own for Gemini (BerriAI/litellm
  ``litellm/llms/vertex_ai/files/transformation.py`` and maximhq/bifrost PR #4152 join the
  same way). :func:`request_line` splices ``"labels":{"ground_key":KEY}`` into the encoded body
  without decoding it.
* The job: :func:`parse_prediction_job` -> :class:`~pipeline.gemini.batch_wire.BatchJob`
  (states are already ``JOB_STATE_*``; the output directory is ``outputInfo.
  gcsOutputDirectory``; counts from ``completionStats``).
* Output line (``predictions.jsonl`` under ``prediction-model-<time>/``):
  ``{"request", "status", "response", "processed_time"}``; ``status`` is ``""`` for a
  success and an error text for a failed row (litellm, same file). :func:`parse_prediction_line`
  -> :class:`~pipeline.gemini.batch_wire.ResultLine`, with the error the same failure would
  have raised online (:func:`status_text_error`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.gemini.api_errors import GeminiError, ProtocolError, classify_http_error
from pipeline.gemini.batch_wire import (
    JOB_STATE_UNSPECIFIED,
    BatchJob,
    ResultLine,
    _int,
    _json_object,
    _timestamp,
    status_error,
)
from pipeline.redaction import redact

__all__ = [
    "parse_gs_uri",
]

KEY_LABEL = "ground_key"  # the request label that carries a line's key
# Label keys and values: lowercase letters, digits, "_" and "-", at most 63 characters
# (https://cloud.google.com/vertex-ai/generative-ai/docs/multimodal/add-labels-to-api-calls).
LABEL_MAX_CHARS = 63  # characters
_LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
# Gemini batch inference limits on Vertex (docs/vertex-batch.md): the input file is one JSONL
# object; the embeddings page states 1 GB and 1,000,000 rows for the same service. Parts stay
# under both with room to spare.
MAX_PART_BYTES = 1_000_000_000  # bytes per input object
MAX_PART_REQUESTS = 200_000  # requests per prediction job
PREDICTION_FILE = re.compile(r"(^|/)predictions[^/]*\.jsonl$")  # an output file's name
ERRORS_FILE = re.compile(r"(^|/)errors[^/]*\.jsonl$")  # failed instances, where written

# google.rpc.Code names -> the HTTP status Google maps them to (google/rpc/code.proto).
_RPC_HTTP = {
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}
# The google.rpc code name a failed row's error body names for an HTTP status.
_HTTP_RPC = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# The HTTP reason phrases a status text may open with ("Bad Request: {...}").
_REASON_HTTP = {
    "bad request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not found": 404,
    "too many requests": 429,
    "internal server error": 500,
    "service unavailable": 503,
    "gateway timeout": 504,
}


def label_value(value: str, *, what: str = "label") -> str:
    """``value`` if Vertex takes it as a label value; ``ValueError`` naming ``what`` if not."""
    if not _LABEL.match(value):
        raise ValueError(
            f"{what} {value!r} is not a Vertex label value (lowercase letters, digits, _ and -,"
            f" at most {LABEL_MAX_CHARS} characters)"
        )
    return value


def job_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` checked as the job's ``labels`` map (keys start with a letter)."""
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise ValueError(f"label key {key!r} is not a Vertex label key")
        label_value(value, what=f"label {key}")
    return dict(labels)


# --- input lines -------------------------------------------------------------------------------


def request_line(key: str, body: bytes) -> bytes:
    """One input line: ``{"request": body + labels.ground_key}`` + newline.

    ``body`` is a ``GenerateContentRequest`` JSON object as
    :class:`~pipeline.gemini.request.GroundedRequestBuilder` encodes it (no ``labels`` of its
    own); it is spliced, never decoded. ``key`` must be a label value (a question id is).
    """
    if not key:
        raise ValueError("an empty key is not a label value")
    label_value(key, what="key")
    if not body.startswith(b"{") or not body.rstrip().endswith(b"}"):
        raise ValueError("a request body must be a JSON object")
    head = b'{"request":{"labels":{"' + KEY_LABEL.encode() + b'":"' + key.encode() + b'"}'
    rest = body[1:].lstrip()
    return head + (b"," if not rest.startswith(b"}") else b"") + rest + b"}\n"


# --- gs:// URIs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GcsPath:
    """``gs://bucket/name``: a bucket and an object name (or a prefix, possibly empty)."""

    bucket: str
    name: str

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}" if self.name else f"gs://{self.bucket}"

    def child(self, *names: str) -> GcsPath:
        parts = [self.name.strip("/"), *(n.strip("/") for n in names)]
        return GcsPath(self.bucket, "/".join(p for p in parts if p))


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


def parse_gs_uri(uri: str) -> GcsPath:
    """``gs://bucket[/name]`` -> :class:`GcsPath`; ``ValueError`` saying what is expected."""
    if not uri.startswith("gs://"):
        raise ValueError(f"{uri!r} is not a Cloud Storage URI (gs://BUCKET/PATH)")
    bucket, _, name = uri[5:].partition("/")
    if not _BUCKET.match(bucket):
        raise ValueError(f"{uri!r}: {bucket!r} is not a bucket name")
    return GcsPath(bucket, name.strip("/"))


# --- the job -------------------------------------------------------------------------------


def parse_prediction_job(document: Any) -> BatchJob:
    """A ``BatchPredictionJob`` resource -> :class:`BatchJob`; :class:`ProtocolError`
    when it names no job."""
    if not isinstance(document, dict):
        raise ProtocolError("a prediction job answer that is not a JSON object")
    name = document.get("name")
    if not isinstance(name, str) or "/batchPredictionJobs/" not in name:
        raise ProtocolError("a prediction job answer without a name")
    info = _json_object(document.get("outputInfo"))
    stats = document.get("completionStats")
    stats = stats if isinstance(stats, dict) else {}
    counts = [_int(stats.get(k)) for k in ("successfulCount", "failedCount", "incompleteCount")]
    known = [c for c in counts if c is not None and c >= 0]
    error = document.get("error")
    labels = _json_object(document.get("labels"))
    return BatchJob(
        name=name,
        state=str(document.get("state") or JOB_STATE_UNSPECIFIED),
        display_name=str(document.get("displayName") or ""),
        model=str(document.get("model") or ""),
        create_time=_timestamp(document.get("createTime")),
        end_time=_timestamp(document.get("endTime")),
        responses_file=info.get("gcsOutputDirectory") or None,
        request_count=sum(known) if known else None,
        failed_count=counts[1],
        error=redact(str(error.get("message") or error))
        if isinstance(error, dict) and error
        else None,
        labels={str(k): str(v) for k, v in labels.items()},
        output_uri_prefix=output_prefix(document),
    )


def output_prefix(document: Any) -> str | None:
    """``outputConfig.gcsDestination.outputUriPrefix`` of a job resource, if it has one."""
    config = document.get("outputConfig") if isinstance(document, dict) else None
    destination = config.get("gcsDestination") if isinstance(config, dict) else None
    prefix = destination.get("outputUriPrefix") if isinstance(destination, dict) else None
    return prefix if isinstance(prefix, str) and prefix else None


# --- output lines ------------------------------------------------------------------------------


def parse_prediction_line(line: bytes) -> ResultLine:
    """Decode one output line. The key is the line's own ``key`` when it has one, else the
    echoed request's ``labels.ground_key``; :class:`ProtocolError` for a line that is not
    a JSON object or carries neither."""
    try:
        document = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise ProtocolError("a prediction line that is not JSON") from None
    if not isinstance(document, dict):
        raise ProtocolError("a prediction line that is not a JSON object")
    key = _line_key(document)
    if key is None:
        raise ProtocolError(f"a prediction line without a {KEY_LABEL} label")
    status = document.get("status")
    response = document.get("response")
    if isinstance(status, str) and status.strip():
        return ResultLine(key, error=status_text_error(status))
    if isinstance(status, dict) and status:  # a google.rpc.Status, should one appear
        return ResultLine(key, error=status_error(status))
    error = document.get("error")  # errors_*.jsonl: the instance plus {code, message}
    if isinstance(error, dict) and error:
        return ResultLine(key, error=status_error(error))
    if isinstance(response, dict):
        return ResultLine(key, response=orjson.dumps(response))
    return ResultLine(key, error=status_text_error("Internal: a row with no response"))


def _line_key(document: dict[str, Any]) -> str | None:
    own = document.get("key")
    if isinstance(own, str | int) and not isinstance(own, bool) and str(own):
        return str(own)
    for holder in (document.get("request"), document.get("instance")):
        if isinstance(holder, dict):
            holder = holder.get("request", holder) if "labels" not in holder else holder
            labels = holder.get("labels") if isinstance(holder, dict) else None
            if isinstance(labels, dict) and isinstance(labels.get(KEY_LABEL), str):
                return labels[KEY_LABEL]
    return None


def status_text_error(text: str) -> GeminiError:
    """A failed row's ``status`` text as the error the same failure raises online.

    The text's shape is not documented (docs/vertex-batch.md): an embedded error body
    (``Bad Request: {"error": {...}}``) is used as the body; otherwise a google.rpc code name
    or an HTTP reason phrase in the text picks the status; otherwise 500 (retried)."""
    brace = text.find("{")
    if brace >= 0:
        try:
            body = orjson.loads(text[brace:])
        except orjson.JSONDecodeError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            code = _int(body["error"].get("code"))
            if code is None:
                code = _RPC_HTTP.get(str(body["error"].get("status")), 500)
            return classify_http_error(code, orjson.dumps(body))
    http = _http_of(text)
    status = _HTTP_RPC.get(http, "UNKNOWN")
    body = {"error": {"code": http, "message": text.strip(), "status": status}}
    return classify_http_error(http, orjson.dumps(body))


def _http_of(text: str) -> int:
    upper = text.upper()
    for name, http in _RPC_HTTP.items():
        if re.search(rf"\b{name}\b", upper):
            return http
    lower = text.lower()
    for phrase, http in _REASON_HTTP.items():
        if lower.startswith(phrase):
            return http
    return 500
