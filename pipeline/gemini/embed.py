"""Gemini embeddings (Developer API): ``embedContent`` / ``batchEmbedContents`` bodies and
responses, pure. The HTTP call is :meth:`EmbeddingClient.embed` (one POST, typed errors out).

Shapes, from Google's ``google/ai/generativelanguage/v1beta/generative_service.proto``
(``EmbedContentRequest {model, content, taskType, title, outputDimensionality}``,
``BatchEmbedContentsRequest {model, requests[]}`` answered by ``{embeddings: [{values}]}``,
in request order) and https://ai.google.dev/api/embeddings. A batch takes at most 100
requests. The response carries no token counts: the ledger estimates them
(:data:`BYTES_PER_TOKEN`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
import msgspec
import orjson

from pipeline.errors import ErrorClass, GroundError
from pipeline.gemini.api_errors import TransientError
from pipeline.gemini.endpoint import Endpoint
from pipeline.gemini.session import SessionOwner

__all__ = [
    "DOCUMENT_TASK",
    "EMBED_BATCH_MAX",
    "QUERY_TASK",
    "EmbeddingClient",
    "batch_embed_body",
    "estimated_tokens",
]

EMBED_BATCH_MAX = 100  # requests in one batchEmbedContents (the API's limit)
BYTES_PER_TOKEN = 4  # the token estimate of a text with no usage reported: ceil(bytes / 4)
DOCUMENT_TASK = "RETRIEVAL_DOCUMENT"
QUERY_TASK = "RETRIEVAL_QUERY"


class _Embedding(msgspec.Struct, frozen=True):
    values: tuple[float, ...] = ()


class _BatchResponse(msgspec.Struct, frozen=True):
    embeddings: tuple[_Embedding, ...] = ()


_decoder = msgspec.json.Decoder(_BatchResponse)


def batch_embed_url(endpoint: Endpoint) -> str:
    """The ``batchEmbedContents`` URL of the model a generateContent endpoint names."""
    return endpoint.url.rsplit(":", 1)[0] + ":batchEmbedContents"


def estimated_tokens(texts: Sequence[str]) -> int:
    return sum(max(1, -(-len(t.encode("utf-8")) // BYTES_PER_TOKEN)) for t in texts)


def batch_embed_body(
    model: str,
    texts: Sequence[str],
    *,
    task_type: str,
    dimensions: int = 0,
    titles: Sequence[str | None] = (),
) -> bytes:
    """One ``batchEmbedContents`` body; ``titles`` (documents only) parallel to ``texts``."""
    name = model if model.startswith("models/") else f"models/{model}"
    requests = []
    for i, text in enumerate(texts):
        request: dict[str, object] = {
            "model": name,
            "content": {"parts": [{"text": text}]},
            "taskType": task_type,
        }
        title = titles[i] if i < len(titles) else None
        if title and task_type == DOCUMENT_TASK:
            request["title"] = title
        if dimensions:
            request["outputDimensionality"] = dimensions
        requests.append(request)
    return orjson.dumps({"requests": requests})


class MalformedEmbeddings(GroundError, ValueError):
    """The body is not a batchEmbedContents response of the size asked for."""


def decode_embeddings(body: bytes, expected: int) -> list[tuple[float, ...]]:
    try:
        decoded = _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise MalformedEmbeddings(f"malformed batchEmbedContents response: {exc}") from None
    if len(decoded.embeddings) != expected or any(not e.values for e in decoded.embeddings):
        raise MalformedEmbeddings(
            f"batchEmbedContents answered {len(decoded.embeddings)} embeddings for {expected} texts"
        )
    return [e.values for e in decoded.embeddings]


@dataclass(frozen=True, slots=True)
class Embedded:
    vectors: list[tuple[float, ...]]
    latency_ms: float


class EmbeddingClient(SessionOwner):
    """``batchEmbedContents`` over its own session; use it as an async context manager."""

    __slots__ = ()

    def __init__(self, *, timeout_s: float) -> None:
        super().__init__(
            timeout=aiohttp.ClientTimeout(total=timeout_s), service="the embeddings endpoint"
        )

    async def embed(self, endpoint: Endpoint, body: bytes, expected: int) -> Embedded:
        """POST one batch; the vectors, or a :class:`pipeline.gemini.api_errors.GeminiError`."""
        headers = {**(await endpoint.auth.headers()), "content-type": "application/json"}
        started = time.perf_counter()
        exchange = await self._exchange(
            "POST", batch_embed_url(endpoint), body=body, headers=headers
        )
        latency_ms = (time.perf_counter() - started) * 1000.0
        try:
            vectors = decode_embeddings(exchange.body, expected)
        except MalformedEmbeddings as exc:
            raise TransientError(
                str(exc), error_class=ErrorClass.MALFORMED_RESPONSE, http_status=exchange.status
            ) from None
        return Embedded(vectors, latency_ms)
