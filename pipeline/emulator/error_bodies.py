"""Google's error bodies, byte for byte in shape (keys, nesting, ``@type`` values).

Every body is ``{"error": {"code", "message", "status", "details"?}}``
(``docs/wire-format.md`` "Error bodies"). The messages and details are the ones real responses
carry; the source of each is named next to it. An :class:`ApiError` is raised inside the server
and rendered by one handler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

JSON_CONTENT_TYPE = "application/json; charset=UTF-8"
HTML_CONTENT_TYPE = "text/html; charset=UTF-8"

_T = "type.googleapis.com/google.rpc."
DEV_SERVICE = "generativelanguage.googleapis.com"
VERTEX_SERVICE = "aiplatform.googleapis.com"
RATE_LIMITS_URL = "https://ai.google.dev/gemini-api/docs/rate-limits"


class ApiError(Exception):
    """An error response: HTTP ``code``, rpc ``status`` name, ``message`` and ``details``."""

    def __init__(
        self,
        code: int,
        status: str,
        message: str,
        details: Sequence[Mapping[str, Any]] = (),
        *,
        kind: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.details = tuple(details)
        self.kind = kind  # a short label for stats ("api_key_invalid", "quota_rpm", ...)

    def body(self) -> bytes:
        err: dict[str, Any] = {"code": self.code, "message": self.message, "status": self.status}
        if self.details:
            err["details"] = list(self.details)
        return orjson.dumps({"error": err})


def echo_request(body: bytes, method: str, url: str, key: str, authorization: str) -> bytes:
    """``body`` (a JSON error body) with the request repeated at the end of its message, as
    some of Google's errors repeat it: the URL with ``key=`` (the key, wherever it was sent)
    and the ``Authorization`` header. A body that is not one of ours is returned as it is."""
    try:
        document = orjson.loads(body)
        error = document["error"]
        message = str(error["message"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return body
    if key and "key=" not in url:
        url += ("&" if "?" in url else "?") + f"key={key}"
    echo = f" Request: {method} {url}"
    if authorization:
        echo += f" Authorization: {authorization}"
    error["message"] = message + echo
    return orjson.dumps(document)


# --- auth -------------------------------------------------------------------------------

_KEY_INVALID = "API key not valid. Please pass a valid API key."


def api_key_invalid() -> ApiError:
    """A key that is not ours: 400 INVALID_ARGUMENT, ErrorInfo API_KEY_INVALID plus a
    LocalizedMessage (continuedev/continue issue #8516 shows the full real body)."""
    return ApiError(
        400,
        "INVALID_ARGUMENT",
        _KEY_INVALID,
        (
            {
                "@type": _T + "ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": DEV_SERVICE},
            },
            {"@type": _T + "LocalizedMessage", "locale": "en-US", "message": _KEY_INVALID},
        ),
        kind="api_key_invalid",
    )


def api_key_missing() -> ApiError:
    """No key at all: 403 PERMISSION_DENIED with no details (PublicAffairs/openai-gemini
    issue #92, gunpal5/Google_GenerativeAI issue #15 show this exact body)."""
    return ApiError(
        403,
        "PERMISSION_DENIED",
        "Method doesn't allow unregistered callers (callers without established identity)."
        " Please use API Key or other form of API consumer identity to call this API.",
        kind="api_key_missing",
    )


_SEE_DEVCONSOLE = "See https://developers.google.com/identity/sign-in/web/devconsole-project."


def vertex_unauthenticated(reason: str, api_version: str) -> ApiError:
    """401 UNAUTHENTICATED on the Vertex surface.

    ``reason`` is the ErrorInfo reason: ``CREDENTIALS_MISSING`` (no Authorization header),
    ``API_KEY_ONLY`` (an API key but no token: real message "API keys are not supported by
    this API...", reason CREDENTIALS_MISSING, a2aproject/a2a-samples issue #43),
    ``ACCESS_TOKEN_EXPIRED`` (one of our tokens, past its expiry) or
    ``ACCESS_TOKEN_TYPE_UNSUPPORTED`` (a token we never issued).
    """
    if reason == "CREDENTIALS_MISSING":
        msg = (
            "Request is missing required authentication credential. Expected OAuth 2 access"
            " token, login cookie or other valid authentication credential. " + _SEE_DEVCONSOLE
        )
    elif reason == "API_KEY_ONLY":
        reason = "CREDENTIALS_MISSING"
        msg = (
            "API keys are not supported by this API. Expected OAuth2 access token or other"
            " authentication credentials that assert a principal."
            " See https://cloud.google.com/docs/authentication"
        )
    else:
        msg = (
            "Request had invalid authentication credentials. Expected OAuth 2 access token,"
            " login cookie or other valid authentication credential. " + _SEE_DEVCONSOLE
        )
    return ApiError(
        401,
        "UNAUTHENTICATED",
        msg,
        (
            {
                "@type": _T + "ErrorInfo",
                "reason": reason,
                "domain": "googleapis.com",
                "metadata": {
                    "service": VERTEX_SERVICE,
                    "method": f"google.cloud.aiplatform.{api_version}"
                    ".PredictionService.GenerateContent",
                },
            },
        ),
        kind="unauthenticated",
    )


# --- request validation -----------------------------------------------------------------


def model_not_found(model: str, api_version: str) -> ApiError:
    """Developer API unknown model: 404 NOT_FOUND with two DebugInfo details, the shape of
    the recorded ``googleai/unary-failure-unknown-model.json`` fixture."""
    msg = (
        f"models/{model} is not found for API version {api_version}, or is not supported for"
        " generateContent. Call ListModels to see the list of available models and their"
        " supported methods."
    )
    return ApiError(
        404,
        "NOT_FOUND",
        msg,
        (
            {
                "@type": _T + "DebugInfo",
                "detail": f"[ORIGINAL ERROR] generic::not_found: {msg}"
                f' [google.rpc.error_details_ext] {{ message: "{msg}" }}',
            },
            {"@type": _T + "DebugInfo", "detail": msg},
        ),
        kind="model_not_found",
    )


def publisher_model_not_found(resource: str) -> ApiError:
    """Vertex unknown model (the message Vertex returns for a bad publisher model)."""
    return ApiError(
        404,
        "NOT_FOUND",
        f"Publisher Model `{resource}` was not found or your project does not have access to"
        " it. Please ensure you are using a valid model version. For more information, see:"
        " https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions",
        kind="model_not_found",
    )


def invalid_json(detail: str) -> ApiError:
    """A body that does not parse: 400 with a BadRequest field violation (proto JSON parser)."""
    msg = f"Invalid JSON payload received. {detail}"
    return ApiError(
        400,
        "INVALID_ARGUMENT",
        msg,
        ({"@type": _T + "BadRequest", "fieldViolations": [{"description": msg}]},),
        kind="invalid_json",
    )


def unknown_field(name: str, at: str) -> ApiError:
    """A field the proto does not have (e.g. ``retrieval`` on the Developer API)."""
    msg = f"Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field."
    return ApiError(
        400,
        "INVALID_ARGUMENT",
        msg,
        ({"@type": _T + "BadRequest", "fieldViolations": [{"field": at, "description": msg}]},),
        kind="unknown_field",
    )


def invalid_argument(message: str, *, kind: str = "invalid_argument") -> ApiError:
    """400 INVALID_ARGUMENT with no details (the tool/schema rejections carry none)."""
    return ApiError(400, "INVALID_ARGUMENT", message, kind=kind)


CONTENTS_MISSING = "* GenerateContentRequest.contents: contents is not specified\n"
SEARCH_RETRIEVAL_ON_2 = (
    "Unable to submit request because Please use google_search field instead of"
    " google_search_retrieval field."
)  # deprecated-generative-ai-js issue #330 (Gemini 2.0)
# vercel/ai issue #10348 (Gemini 3)
SEARCH_RETRIEVAL_ON_3 = (
    "google_search_retrieval is not supported. Please use google_search tool instead."
)
SCHEMA_WITH_SEARCH = (
    "Unable to submit request because controlled generation is not supported with"
    " google_search tool. Learn more:"
    " https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/gemini"
)  # python-genai issue #665


# --- quota --------------------------------------------------------------------------------

_QUOTA_IDS = {
    # bucket: (quotaMetric, quotaId) - free-tier names, the ones seen in real bodies
    # (google/langextract issue #50; google-gemini/gemini-cli issue #8437).
    "rpm": (
        "generativelanguage.googleapis.com/generate_content_free_tier_requests",
        "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
    ),
    "tpm": (
        "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
        "GenerateContentInputTokensPerModelPerMinute-FreeTier",
    ),
}
_QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more"
    " information on this error, head to: " + RATE_LIMITS_URL + "."
)
_HELP = {
    "@type": _T + "Help",
    "links": [{"description": "Learn more about Gemini API quotas", "url": RATE_LIMITS_URL}],
}


def format_retry_delay(seconds: float) -> str:
    """A google.protobuf.Duration string: ``"34.4s"``, ``"15s"`` (tenths, rounded up)."""
    tenths = max(1, -int(-seconds * 10 // 1))  # ceil, at least 0.1 s
    whole, frac = divmod(tenths, 10)
    return f"{whole}.{frac}s" if frac else f"{whole}s"


def quota_exceeded(
    bucket: str, model: str, limit: int, retry_after_s: float | None, *, kind: str = "quota"
) -> ApiError:
    """Developer API 429 RESOURCE_EXHAUSTED.

    ``rpm``/``tpm``: QuotaFailure + Help + RetryInfo, as google/langextract issue #50 shows
    (the vercel-ai ``google-429-retry-info.json`` fixture is the same body trimmed to
    QuotaFailure.quotaId + RetryInfo). ``grounded_rpd``: Help only, no QuotaFailure and no
    RetryInfo (googleapis/python-genai issue #1427, the daily grounding bucket).
    """
    if bucket == "grounded_rpd":
        return ApiError(429, "RESOURCE_EXHAUSTED", _QUOTA_MESSAGE, (_HELP,), kind=kind)
    metric, quota_id = _QUOTA_IDS[bucket]
    details: list[dict[str, Any]] = [
        {
            "@type": _T + "QuotaFailure",
            "violations": [
                {
                    "quotaMetric": metric,
                    "quotaId": quota_id,
                    "quotaDimensions": {"location": "global", "model": model},
                    "quotaValue": str(limit),
                }
            ],
        },
        _HELP,
    ]
    if retry_after_s is not None:
        details.append({"@type": _T + "RetryInfo", "retryDelay": format_retry_delay(retry_after_s)})
    return ApiError(429, "RESOURCE_EXHAUSTED", _QUOTA_MESSAGE, details, kind=kind)


def vertex_quota_exceeded() -> ApiError:
    """Vertex 429: a bare message, no details, no RetryInfo (gemini-cli issue #14831)."""
    return ApiError(
        429,
        "RESOURCE_EXHAUSTED",
        "Resource exhausted. Please try again later. Please refer to"
        " https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.",
        kind="quota",
    )


# --- server faults ------------------------------------------------------------------------


def internal() -> ApiError:
    """gemini-cli issue #19466."""
    return ApiError(500, "INTERNAL", "Internal error encountered.", kind="fault_500")


def unavailable(*, kind: str = "fault_503") -> ApiError:
    """gemini-cli issue #5191."""
    return ApiError(
        503, "UNAVAILABLE", "The model is overloaded. Please try again later.", kind=kind
    )


def deadline_exceeded() -> ApiError:
    """504; the standard google.rpc message for DEADLINE_EXCEEDED."""
    return ApiError(
        504,
        "DEADLINE_EXCEEDED",
        "Deadline expired before operation could complete.",
        kind="fault_504",
    )


def _gfe_page(code: int, title: str, text: str) -> bytes:
    """The Google Front End's HTML error page (what a proxy, not the API, returns)."""
    return (
        "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n"
        '  <meta name=viewport content="initial-scale=1, minimum-scale=1, width=device-width">\n'
        f"  <title>Error {code} ({title})!!1</title>\n"
        "  <style>*{margin:0;padding:0}html{font:15px/22px arial,sans-serif}"
        "body{margin:7% auto 0;max-width:390px;min-height:180px;padding:30px 0 15px}</style>\n"
        "  <a href=//www.google.com/><span id=logo aria-label=Google></span></a>\n"
        f"  <p><b>{code}.</b> <ins>That’s an error.</ins>\n"
        f"  <p>{text}  <ins>That’s all we know.</ins>\n"
    ).encode()


BAD_GATEWAY_HTML = _gfe_page(
    502,
    "Server Error",
    "The server encountered a temporary error and could not complete your request."
    "<p>Please try again in 30 seconds.",
)
FORBIDDEN_HTML = _gfe_page(
    403, "Forbidden", "Your client does not have permission to get URL from this server."
)
NOT_FOUND_HTML = _gfe_page(404, "Not Found", "The requested URL was not found on this server.")
