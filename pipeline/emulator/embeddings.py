"""``embedContent`` / ``batchEmbedContents`` (Developer API): deterministic vectors that make
dense retrieval meaningful.

A text's vector is a bag of concepts: its words, lower-cased, accents folded ("Kraków" and
"Krakow" are one word), a plural ``s`` dropped, numbers and common function words left out,
and the words of a few families (:data:`CONCEPTS`: "inhabitants", "residents" and "people"
are all *population*) taken as one concept. Each is hashed into ``outputDimensionality``
buckets (768 when not given; feature hashing with a keyed BLAKE2b, signed), and the vector
normalised to length 1. So texts about the same things are close even where they share no
word, as a real embedding model's are: a question about "residents" finds the passage about
"inhabitants" that a lexical search misses. The same text always gets the same vector under
the same seed. Shapes as Google's ``generative_service.proto``: ``{embedding: {values}}``
and ``{embeddings: [{values}]}``.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from typing import Any

from pipeline.emulator import error_bodies

DEFAULT_DIMENSIONS = 768  # gemini-embedding-001's recommended size
MAX_DIMENSIONS = 3072
MAX_BATCH = 100  # requests per batchEmbedContents
_WORD = re.compile(r"\w+", re.UNICODE)

# Words of one family, taken as one concept (after folding and dropping a plural "s").
CONCEPTS: dict[str, tuple[str, ...]] = {
    "population": (
        "population",
        "inhabitant",
        "resident",
        "people",
        "populace",
        "citizen",
        "live",
        "populous",
        "census",
    ),
    "airport": (
        "airport",
        "airfield",
        "aerodrome",
        "flight",
        "fly",
        "flyer",
        "plane",
        "terminal",
        "runway",
        "airline",
    ),
    "distance": ("far", "distance", "km", "kilometre", "kilometer", "mile", "away", "close"),
    "centre": ("centre", "center", "downtown", "middle"),
    "city": ("city", "town", "capital", "municipality"),
}
_CONCEPT_OF = {word: concept for concept, words in CONCEPTS.items() for word in words}
STOP_WORDS = frozenset(
    (
        "a",
        "about",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "doe",
        "does",
        "for",
        "from",
        "ha",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "main",
        "many",
        "much",
        "of",
        "on",
        "or",
        "serf",
        "serve",
        "serving",
        "so",
        "that",
        "the",
        "their",
        "there",
        "these",
        "they",
        "this",
        "to",
        "wa",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
    )
)


def _fold(word: str) -> str:
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def concepts(text: str) -> list[str]:
    """The features a text's vector is made of, in order (a word may repeat)."""
    found = []
    for raw in _WORD.findall(text.lower()):
        word = _fold(raw)
        if word.isdigit():
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        if word in STOP_WORDS:
            continue
        found.append(_CONCEPT_OF.get(word, word))
    return found


def vector(seed_key: bytes, text: str, dimensions: int) -> list[float]:
    values = [0.0] * dimensions
    for feature in concepts(text):
        digest = hashlib.blake2b(feature.encode(), digest_size=8, key=seed_key[:32]).digest()
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
