"""The nearest vectors to a query by cosine similarity, brute force. Pure.

What dense search falls back to when the database has no vector extension (neither
sqlite-vec nor pgvector): the stored vectors are read a page at a time and each page scored
here, the best ``limit`` kept across pages (:class:`Nearest`). numpy does the arithmetic when
it is installed; plain Python otherwise (correct, and fine for a few thousand chunks).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Sequence
from typing import Any

__all__ = ["Nearest", "cosine"]

try:  # optional: a dependency of the dev tools and of pyarrow, not of ground itself
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is present where the tests run
    _np = None


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity in [-1, 1]; 0 when either vector is zero or their sizes differ."""
    if len(a) != len(b):
        return 0.0
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    return dot / norms if norms else 0.0


def _floats(stored: bytes | Sequence[float]) -> Sequence[float]:
    if isinstance(stored, bytes | bytearray | memoryview):
        values = array("f")
        values.frombytes(bytes(stored))
        return values
    return stored


def _matrix(vectors: list[bytes | Sequence[float]], size: int) -> Any:
    """The page as one float32 matrix (numpy), or None when a vector is not of ``size``."""
    assert _np is not None
    if all(isinstance(v, bytes) for v in vectors):
        if any(len(v) != 4 * size for v in vectors):  # type: ignore[arg-type]
            return None
        joined = b"".join(vectors)  # type: ignore[arg-type]
        return _np.frombuffer(joined, dtype="<f4").reshape(len(vectors), size)
    floats = [_floats(v) for v in vectors]
    if any(len(v) != size for v in floats):
        return None
    return _np.asarray(floats, dtype=_np.float32)


class Nearest:
    """The ``limit`` items most similar to ``query`` among those offered, page by page."""

    __slots__ = ("_heap", "_limit", "_norm", "_query", "_seen")

    def __init__(self, query: Sequence[float], limit: int) -> None:
        self._query = list(query)
        self._limit = limit
        self._heap: list[tuple[float, int, int]] = []  # (similarity, -order, id): a min-heap
        self._seen = 0
        self._norm = math.sqrt(math.fsum(x * x for x in self._query))

    def offer(self, page: Sequence[tuple[int, bytes | Sequence[float]]]) -> None:
        """Score one page of ``(id, vector)``, a vector being floats or float32
        little-endian bytes (as SQLite stores them); a vector of another size scores 0."""
        if not page or self._limit <= 0:
            return
        for item_id, similarity in zip(
            (i for i, _ in page), self._similarities([v for _, v in page]), strict=True
        ):
            self._seen += 1
            entry = (similarity, -self._seen, item_id)  # ties: the first offered wins
            if len(self._heap) < self._limit:
                heapq.heappush(self._heap, entry)
            elif entry > self._heap[0]:
                heapq.heapreplace(self._heap, entry)

    def _similarities(self, vectors: list[bytes | Sequence[float]]) -> list[float]:
        size = len(self._query)
        if _np is not None and self._norm:
            matrix = _matrix(vectors, size)
            if matrix is not None:
                norms = _np.linalg.norm(matrix, axis=1) * self._norm
                dots = matrix @ _np.asarray(self._query, dtype=_np.float32)
                safe = _np.where(norms > 0, norms, 1.0)
                return [float(s) for s in _np.where(norms > 0, dots / safe, 0.0)]
        return [cosine(self._query, _floats(v)) for v in vectors]

    def best(self) -> list[tuple[int, float]]:
        """``(id, similarity)``, most similar first."""
        return [(i, s) for s, _, i in sorted(self._heap, reverse=True)]
