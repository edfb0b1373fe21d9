"""Reciprocal rank fusion: several rankings of the same items -> one. Pure.

Each item scores ``sum(1 / (k + rank))`` over the rankings it appears in (rank from 1), as in
Cormack, Clarke and Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and individual
Rank Learning Methods" (SIGIR 2009), where ``k = 60``. Only ranks are used, so a lexical
score and a vector distance never have to be made comparable.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

__all__ = ["RRF_K", "reciprocal_rank_fusion"]

RRF_K = 60  # the constant of the paper: dampens the weight of the very first ranks

K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Iterable[Sequence[K]], k: int = RRF_K
) -> list[tuple[K, float]]:
    """Items with their fused scores, best first; ties keep the order first seen."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    order = {item: n for n, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], order[pair[0]]))
