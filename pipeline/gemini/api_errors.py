"""The API's failures, typed, in the one error tree of :mod:`pipeline.errors`.

=====================  =========  =====================================================
class                  branch     when
=====================  =========  =====================================================
``Unreachable``        retryable  no connection could be made (DNS, refused): nothing was
                                  sent, so no attempt is spent; repeated, it stops the run
``TransientError``     retryable  408/429/500/502/503/504, timeouts, resets, a truncated or
                                  non-JSON body (online, a 429 or a 503 is then read by the
                                  caller into what the policy waits out: pipeline.errors'
                                  ``Throttled``, ``Overloaded``, ``GroundingPaused``)
``InvalidUsage``       retryable  a 200 whose usageMetadata cannot be priced: paid, so
                                  ledgered at its request's worst case
``PermanentError``     permanent  400 INVALID_ARGUMENT, 404 model, other 4xx
``FatalError``         run-fatal  401/403: the credentials or project are wrong; stop the
                                  run rather than burn every question
``ModelNotFound``      run-fatal  404 for the model itself: stop the run at once (exit 2)
=====================  =========  =====================================================

Messages never contain credentials: they are built from the status, Google's ``status`` and
``message``, and the endpoint's path, never from request headers or the query string; and
since a server's ``message`` may echo the request (its URL with a ``?key=``, a header), every
message is redacted when the error is made (:class:`pipeline.errors.CallError`), and so is an
error class taken from the body. The raw body kept on an error (``body``, for the 429 kinds)
is read by the classifiers only: it is never logged, stored or printed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pipeline.errors import (
    CallError,
    ErrorClass,
    ModelGone,
    PermanentCallError,
    RetryableError,
    RunFatalError,
)
from pipeline.gemini.wire import ErrorStatus, decode_error
from pipeline.redaction import redact

__all__ = [
    "GeminiError",
    "InvalidUsage",
    "ModelNotFound",
    "PermanentError",
    "QuotaKind",
    "TransientError",
    "Unreachable",
    "classify_429",
]

RETRYABLE_HTTP = frozenset({408, 429, 500, 502, 503, 504})
FATAL_HTTP = frozenset({401, 403})
# ErrorInfo reasons that no retry can fix: a wrong key arrives as 400 INVALID_ARGUMENT with
# reason API_KEY_INVALID on the Developer API, so the status alone does not tell.
FATAL_REASONS = frozenset(
    {
        "API_KEY_INVALID",
        "API_KEY_SERVICE_BLOCKED",
        "ACCESS_TOKEN_EXPIRED",
        "ACCESS_TOKEN_SCOPE_INSUFFICIENT",
        "BILLING_DISABLED",
        "CONSUMER_INVALID",
        "CREDENTIALS_MISSING",
        "SERVICE_DISABLED",
    }
)
MAX_KEPT_BODY = 16 * 1024  # bytes of an error body kept for classification (429 kinds)
MAX_RETRY_AFTER_CHARS = 64  # characters of a Retry-After header kept (a date is 29)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


class GeminiError(CallError):
    """A failure at the API edge: the HTTP status and the error body, when there was one."""

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.body = b""  # the error body as received (truncated), for finer classification
        # The response's Retry-After header as sent (seconds or an HTTP date), when it had
        # one: read by the retry decision (pipeline.limits.retry_after), never trusted here.
        self.retry_after: str | None = None


class Unreachable(GeminiError, RetryableError):
    error_class = ErrorClass.UNREACHABLE


class TransientError(GeminiError, RetryableError):
    def __init__(
        self,
        message: str,
        *,
        error_class: str,
        http_status: int | None = None,
        retry_delay: float | None = None,
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.error_class = error_class
        # Seconds the server asked us to wait (RetryInfo.retryDelay); a floor, not a hint.
        self.retry_delay = retry_delay


class InvalidUsage(TransientError):
    """A 200 whose ``usageMetadata`` cannot be priced (a negative or absurd count): a
    malformed response, retried like one; but the server answered, so the call was paid,
    and its ledger row carries the worst case of its request, never less than zero."""

    def __init__(self, problem: str, *, http_status: int | None = 200) -> None:
        super().__init__(
            f"malformed generateContent response: {problem}",
            error_class=ErrorClass.MALFORMED_RESPONSE,
            http_status=http_status,
        )


class PermanentError(GeminiError, PermanentCallError):
    def __init__(self, message: str, *, error_class: str, http_status: int | None = None) -> None:
        super().__init__(message, http_status=http_status)
        self.error_class = error_class


class FatalError(GeminiError, RunFatalError):
    error_class = ErrorClass.AUTH


class ModelNotFound(GeminiError, ModelGone):
    """404 for the model itself: the Developer API's ``models/X is not found for API
    version ...``, Vertex's ``Publisher Model `...` was not found``, or a model that is ``no
    longer available``. Not a 404 for anything else (a batch, a file, a method)."""


# The messages of a 404 for the model itself (pipeline/emulator/error_bodies.py has both).
_MODEL_GONE = re.compile(
    r"models/\S+ is not found for API version|Publisher Model `[^`]*` was not found"
    r"|models/\S+ is no longer available",
)


def parse_duration(value: str | None) -> float | None:
    """A protobuf Duration in JSON ("34.4s") -> seconds; None when absent or malformed."""
    if value is None:
        return None
    match = _DURATION.match(value.strip())
    return float(match.group(1)) if match else None


def retry_delay_of(error: ErrorStatus) -> float | None:
    for detail in error.details:
        if detail.type is not None and detail.type.endswith("google.rpc.RetryInfo"):
            return parse_duration(detail.retry_delay)
    return None


def classify_http_error(
    status: int, body: bytes, headers: Mapping[str, str] | None = None
) -> GeminiError:
    """The error for a non-2xx response, from its status and (if it is one) Google's body;
    ``headers`` (names lower-cased): its ``Retry-After`` is kept on the error as sent."""
    error = decode_error(body)
    if error is not None:
        google_status = redact(error.status or "UNKNOWN")
        text = f"HTTP {status} {google_status}: {error.message}"
    else:
        google_status = None
        text = f"HTTP {status} with a non-Google body ({len(body)} bytes)"
    result: GeminiError
    if status in RETRYABLE_HTTP:
        delay = retry_delay_of(error) if error is not None else None
        error_class = ErrorClass.RATE_LIMITED if status == 429 else f"http_{status}"
        result = TransientError(
            text, error_class=error_class, http_status=status, retry_delay=delay
        )
    elif status == 404 and error is not None and _MODEL_GONE.search(error.message or ""):
        result = ModelNotFound(text, http_status=status)
    elif status in FATAL_HTTP or (
        error is not None and any(d.reason in FATAL_REASONS for d in error.details)
    ):
        result = FatalError(text, http_status=status)
    else:
        error_class = (google_status or f"http_{status}").lower()
        result = PermanentError(text, error_class=error_class, http_status=status)
    result.body = body[:MAX_KEPT_BODY]
    if headers is not None:
        retry_after = headers.get("retry-after")
        result.retry_after = retry_after[:MAX_RETRY_AFTER_CHARS] if retry_after else None
    return result


# --- 429 classification ---------------------------------------------------------------------

QuotaKind = Literal["rate", "daily", "daily_grounding", "bare", "unknown"]

_DAILY = re.compile(r"per_?day|daily|\brpd\b|\brpd_|_rpd\b", re.IGNORECASE)
_GROUNDING = re.compile(r"ground|search", re.IGNORECASE)


def classify_429(
    body: bytes | str, *, grounded: bool = True, backend: str = "developer"
) -> QuotaKind:
    """What a 429 body says about the quota that ran out.

    ``body`` is the raw response body, decoded with the wire's error structs
    (:class:`~pipeline.gemini.wire.ErrorDetail` carries the QuotaFailure violations and the
    ErrorInfo metadata).
    ``grounded``: the request declared a grounding tool. ``backend``: developer | vertex.

    * ``"daily_grounding"``: the daily grounding bucket, as a quota name (QuotaFailure
      ``quotaId``/``quotaMetric``, ErrorInfo ``metadata.quota_limit``/``quota_metric``) says:
      per-day *and* grounding/search. Pause grounding until the daily reset.
    * ``"bare"``: on the Developer API for a grounded request, no QuotaFailure, no ErrorInfo
      quota and no RetryInfo at all, only a ``Help`` link. That is the body reported after
      ~5-6k grounded requests/day on tier 3 (googleapis/python-genai #1427; the emulator's
      ``grounded_rpd`` 429 has that shape), but a momentary refusal can look the same: one
      such 429 is no evidence of a day's exhaustion. The caller probes
      (:class:`~pipeline.limits.probe.DailyProbe`) before it pauses for the day.
    * ``"daily"``: a per-day quota that is not about grounding, e.g.
      ``GenerateRequestsPerDayPerProjectPerModel-FreeTier`` (``docs/wire-format.md``
      "Error bodies"; such quotas "reset at midnight Pacific",
      ai.google.dev/gemini-api/docs/rate-limits). Every call of that model waits for the
      reset, not only grounded ones. A kind of its own because its action differs from both
      others.
    * ``"rate"``: a per-minute quota (``...PerMinute...``, RPM/TPM; langextract #50, the
      vercel-ai ``google-429-retry-info.json`` and Firebase ``unary-failure-quota-exceeded``
      fixtures), or any 429 with RetryInfo and no per-day name, or a Vertex 429 without
      details (Dynamic Shared Quota: "Resource exhausted. Please try again later",
      gemini-cli #14831). Back off (RetryInfo as the floor) and lower the AIMD rate.
    * ``"unknown"``: anything else (not a Google body; an ungrounded Developer call with a
      bare 429). Treat like ``"rate"``. Note: 2026 spend-based caps also answer 429
      RESOURCE_EXHAUSTED (``docs/wire-format.md`` "Error bodies"); their body shape is unconfirmed,
      and a bare one on a grounded call would read as ``"bare"``: probed, then a pause until
      the reset if it persists.
    """
    status = decode_error(body.encode() if isinstance(body, str) else body)
    if status is None:
        return "unknown"
    names, has_retry_info = _quota_details(status)
    if names:
        daily = [n for n in names if _DAILY.search(n)]
        if daily:
            return "daily_grounding" if any(_GROUNDING.search(n) for n in daily) else "daily"
        return "rate"
    if has_retry_info:
        return "rate"
    if backend == "vertex":
        return "rate"
    if grounded:
        return "bare"
    return "unknown"


def _quota_details(status: ErrorStatus) -> tuple[list[str], bool]:
    """The quota names a 429's details give (QuotaFailure ``quotaId``/``quotaMetric``,
    ErrorInfo ``metadata.quota_limit``/``quota_metric``), and whether it carries RetryInfo."""
    names: list[str] = []
    has_retry_info = False
    for detail in status.details:
        kind = detail.type or ""
        if kind.endswith("google.rpc.RetryInfo") and detail.retry_delay is not None:
            has_retry_info = True
        elif kind.endswith("google.rpc.QuotaFailure"):
            for violation in detail.violations:
                names.extend(n for n in (violation.quota_id, violation.quota_metric) if n)
        elif kind.endswith("google.rpc.ErrorInfo") and detail.metadata:
            names.extend(
                v
                for k, v in detail.metadata.items()
                if k in ("quota_limit", "quota_metric") and isinstance(v, str) and v
            )
    return names, has_retry_info


class ProtocolError(PermanentError):
    """The server answered 2xx with something its API does not send (no upload URL, a batch
    without a name, a result line that is not JSON, a line longer than any can be)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_class=ErrorClass.MALFORMED_RESPONSE)
