"""Searching the job's own index for a question: lexical by default, fused with dense ranks.

The question becomes a list of terms (words, lower-cased, common English function words
left out, at most :data:`MAX_QUERY_TERMS`); any term may match. Lexical hits score in
``[0, 1)`` (:mod:`pipeline.store.documents`); those under ``min_score`` do not count, and
none left means "nothing relevant found" (no passages). With a query vector (``[retrieval]
dense``) the nearest chunks are fused with the lexical ones by reciprocal rank fusion. The
nearest are found by the database where it has sqlite-vec or pgvector, else by scanning the
stored vectors here (:mod:`pipeline.retrieval.nearest`): the same ranks, slower on a large
index.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.retrieval.fusion import reciprocal_rank_fusion
from pipeline.retrieval.markers import Passage
from pipeline.retrieval.nearest import Nearest
from pipeline.store import documents as store

__all__ = ["Retrieved", "query_terms", "search"]

MAX_QUERY_TERMS = 32  # terms of a question searched for; the rest are left out
CANDIDATES_PER_PASSAGE = 4  # hits fetched per passage kept, from each ranking, before fusion
MIN_TERM_CHARS = 2  # shorter Latin words are left out ("a", "I"); CJK characters are kept

_WORD = re.compile(r"\w+", re.UNICODE)
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "in",
        "into",
        "is",
        "it",
        "its",
        "may",
        "might",
        "of",
        "on",
        "or",
        "our",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "about",
        "all",
        "any",
        "each",
        "also",
        "such",
        "not",
        "no",
        "nor",
        "only",
        "own",
        "same",
        "very",
        "just",
    ]
)


def query_terms(question: str) -> list[str]:
    """The words searched for, in order of first appearance."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(question.lower()):
        word = match.group(0)
        if word in STOP_WORDS or (len(word) < MIN_TERM_CHARS and word.isascii()):
            continue
        seen.setdefault(word, None)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen)


@dataclass(frozen=True, slots=True)
class Retrieved:
    passages: tuple[Passage, ...]  # best first; () = nothing relevant found
    query: str  # the terms searched for, as stored in the answer's retrieval_queries
    note: str | None = None  # a warning the answer carries (none is made today)


async def _scan(
    connection: AsyncConnection, job_id: int, vector: Sequence[float], limit: int
) -> list[store.Hit]:
    """Dense search with no vector extension in the database: every stored vector scored
    here, a page at a time."""
    nearest = Nearest(vector, limit)
    async for page in store.vector_pages(connection, job_id):
        nearest.offer(page)
    return await store.chunk_hits(connection, nearest.best())


def _passage(hit: store.Hit, score: float) -> Passage:
    return Passage(hit.doc_id, hit.title, hit.uri, hit.text, score)


async def search(
    connection: AsyncConnection,
    job_id: int,
    question: str,
    *,
    top_k: int,
    min_score: float = 0.0,
    query_vector: Sequence[float] | None = None,
) -> Retrieved:
    """The ``top_k`` passages for ``question`` (see the module docstring)."""
    terms = query_terms(question)
    query = " ".join(terms)
    wanted = top_k * CANDIDATES_PER_PASSAGE
    lexical = [
        h
        for h in await store.lexical_search(connection, job_id, terms, wanted)
        if h.score >= min_score
    ]
    if query_vector is None:
        return Retrieved(tuple(_passage(h, h.score) for h in lexical[:top_k]), query)
    if not lexical and min_score > 0:
        return Retrieved((), query)  # nothing lexically relevant: dense alone is not trusted
    try:
        dense = await store.dense_search(connection, job_id, query_vector, wanted)
    except store.DenseUnavailable:
        dense = await _scan(connection, job_id, query_vector, wanted)
    hits = {h.chunk_id: h for h in [*dense, *lexical]}
    fused = reciprocal_rank_fusion([[h.chunk_id for h in lexical], [h.chunk_id for h in dense]])
    return Retrieved(tuple(_passage(hits[cid], score) for cid, score in fused[:top_k]), query)
