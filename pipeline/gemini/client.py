"""The HTTP edge: one aiohttp session per run, one POST per call, typed errors out.

A call returns the raw body (stored for audit) and the decoded response, or raises a
:class:`~pipeline.gemini.api_errors.GeminiError` subclass. Nothing here retries: retry policy lives
with the worker, which knows the question's attempt budget.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

from pipeline.errors import ErrorClass
from pipeline.gemini.api_errors import (
    InvalidUsage,
    PermanentError,
    TransientError,
    classify_http_error,
)
from pipeline.gemini.endpoint import Endpoint
from pipeline.gemini.interactions_map import decode_interaction, interaction_error_body
from pipeline.gemini.interactions_request import INTERACTIONS, interactions_body
from pipeline.gemini.session import SessionOwner, TransportErrors
from pipeline.gemini.wire import (
    GenerateContentResponse,
    MalformedResponse,
    MalformedUsage,
    decode_response,
    usage_problem,
)

__all__ = [
    "CallResult",
    "GeminiClient",
]

CONNECT_TIMEOUT_S = 10.0  # establishing a TCP/TLS connection
MAX_BODY_BYTES = 64 * 1024 * 1024  # a response larger than this is refused as hostile


@dataclass(frozen=True, slots=True)
class CallResult:
    response: GenerateContentResponse
    raw: bytes
    latency_ms: float


class GeminiClient(SessionOwner):
    """Calls generateContent endpoints over one session. Use as an async context manager."""

    __slots__ = ("_timeout",)

    def __init__(self, *, max_connections: int, timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=CONNECT_TIMEOUT_S)
        super().__init__(
            timeout=self._timeout,
            limit=max_connections,
            headers={"content-type": "application/json"},
        )

    async def generate(
        self, endpoint: Endpoint, body: bytes, headers: Mapping[str, str] | None = None
    ) -> CallResult:
        """POST ``body`` to ``endpoint``; ``headers``: its credentials when the caller has
        them already (else fetched here)."""
        if headers is None:
            headers = await endpoint.auth.headers()
        interactions = endpoint.api == INTERACTIONS
        if interactions:  # the same request, in the Interactions API's shape
            body = interactions_body(body, endpoint.model)
        started = time.perf_counter()
        with TransportErrors(_where(endpoint.url), self._timeout.total):
            async with self._session.post(endpoint.url, data=body, headers=headers) as resp:
                raw = await _read_body(resp)
                status = resp.status
                retry_after = resp.headers.get("Retry-After")
        latency_ms = (time.perf_counter() - started) * 1000.0
        if not 200 <= status < 300:
            told = {"retry-after": retry_after} if retry_after is not None else None
            if interactions:  # its error.code is a string: read as the same classes
                raw = interaction_error_body(raw, status)
            raise classify_http_error(status, raw, told)
        try:
            response = decode_interaction(raw) if interactions else decode_response(raw)
        except MalformedUsage as exc:  # whole JSON, answered: paid, but not priceable
            raise InvalidUsage(exc.problem, http_status=status) from None
        except MalformedResponse as exc:
            # A 200 with a cut or non-JSON body: the network or a proxy broke it; ask again.
            raise TransientError(
                str(exc), error_class=ErrorClass.MALFORMED_RESPONSE, http_status=status
            ) from None
        problem = usage_problem(response.usage_metadata)
        if problem is not None:  # never priced: a negative count would refund the budget
            raise InvalidUsage(problem, http_status=status)
        return CallResult(response, raw, latency_ms)


async def _read_body(resp: aiohttp.ClientResponse) -> bytes:
    """The whole body, refusing one larger than :data:`MAX_BODY_BYTES` (a hostile server)."""
    too_large = PermanentError(
        f"response body over {MAX_BODY_BYTES} bytes", error_class=ErrorClass.OVERSIZED_RESPONSE
    )
    if resp.content_length is not None and resp.content_length > MAX_BODY_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _where(url: str) -> str:
    """The endpoint's scheme://host:port only (the URL holds no secret, but keep logs short)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"
