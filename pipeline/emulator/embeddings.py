"""``embedContent`` / ``batchEmbedContents`` (Developer API): deterministic vectors.

Each text's vector is its words hashed into ``outputDimensionality`` buckets (768 when not
given; feature hashing with a keyed BLAKE2b, signed), normalised to length 1. Texts sharing
words get close vectors, so a dense search over them behaves like a (crude) real one, and the
same text always gets the same vector under the same seed. Shapes as Google's
``generative_service.proto``: ``{embedding: {values}}`` and ``{embeddings: [{values}]}``.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from pipeline.emulator import error_bodies

DEFAULT_DIMENSIONS = 768  # gemini-embedding-001's recommended size
MAX_DIMENSIONS = 3072
MAX_BATCH = 100  # requests per batchEmbedContents
_WORD = re.compile(r"\w+", re.UNICODE)


def vector(seed_key: bytes, text: str, dimensions: int) -> list[float]:
    values = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8, key=seed_key[:32]).digest()
        bucket = int.from_bytes(digest[:4], "big") % dimensions
        values[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [round(v / norm, 7) for v in values]


def _text(request: Any, where: str) -> str:
    content = request.get("content") if isinstance(request, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not parts:
        raise error_bodies.invalid_argument(f"* {where}content: contents must not be empty\n")
    return " ".join(p.get("text", "") for p in parts if isinstance(p, dict))


def _dimensions(request: dict[str, Any]) -> int:
    size = request.get("outputDimensionality") or request.get("output_dimensionality")
    if size is None:
        return DEFAULT_DIMENSIONS
    if not isinstance(size, int) or not 1 <= size <= MAX_DIMENSIONS:
        raise error_bodies.invalid_argument(
            f"* outputDimensionality must be between 1 and {MAX_DIMENSIONS}\n"
        )
    return size


def embed(seed_key: bytes, data: Any, method: str) -> dict[str, Any]:
    """The response body of one embedContent or batchEmbedContents request."""
    if not isinstance(data, dict):
        raise error_bodies.invalid_json("Root element must be a message.")
    if method == "embedContent":
        return {"embedding": {"values": vector(seed_key, _text(data, ""), _dimensions(data))}}
    requests = data.get("requests")
    if not isinstance(requests, list) or not requests:
        raise error_bodies.invalid_argument("* BatchEmbedContentsRequest.requests: required\n")
    if len(requests) > MAX_BATCH:
        raise error_bodies.invalid_argument(
            f"* BatchEmbedContentsRequest.requests: at most {MAX_BATCH} requests in a batch\n"
        )
    return {
        "embeddings": [
            {"values": vector(seed_key, _text(r, f"requests[{i}]."), _dimensions(r))}
            for i, r in enumerate(requests)
        ]
    }
