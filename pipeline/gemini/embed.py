"""Gemini embeddings (Developer API): ``embedContent`` / ``batchEmbedContents`` bodies and
responses, pure. The HTTP call is :func:`post_embeddings` (one POST, typed errors out).

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

from pipeline.errors import ErrorClass
from pipeline.gemini.api_errors import TransientError, Unreachable, classify_http_error
from pipeline.gemini.endpoint import Endpoint

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


class MalformedEmbeddings(ValueError):
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


async def post_embeddings(
    session: aiohttp.ClientSession, endpoint: Endpoint, body: bytes, expected: int
) -> Embedded:
    """POST one batch; the vectors, or a :class:`pipeline.gemini.api_errors.GeminiError`."""
    headers = {**(await endpoint.auth.headers()), "content-type": "application/json"}
    url = batch_embed_url(endpoint)
    started = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            raw = await resp.read()
            status = resp.status
    except aiohttp.ClientConnectorError as exc:
        raise Unreachable(f"cannot connect to the embeddings endpoint: {exc.os_error}") from None
    except TimeoutError:
        raise TransientError(
            "no complete embeddings response in time", error_class=ErrorClass.TIMEOUT
        ) from None
    except aiohttp.ClientError as exc:
        raise TransientError(
            f"connection failed: {type(exc).__name__}", error_class=ErrorClass.CONNECTION
        ) from None
    latency_ms = (time.perf_counter() - started) * 1000.0
    if not 200 <= status < 300:
        raise classify_http_error(status, raw)
    try:
        vectors = decode_embeddings(raw, expected)
    except MalformedEmbeddings as exc:
        raise TransientError(
            str(exc), error_class=ErrorClass.MALFORMED_RESPONSE, http_status=status
        ) from None
    return Embedded(vectors, latency_ms)
