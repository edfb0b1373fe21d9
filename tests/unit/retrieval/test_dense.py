"""Dense retrieval's pure parts: reciprocal rank fusion of a lexical and a dense ranking,
the brute-force nearest vectors (paged, with and without numpy), and the emulator's
bag-of-concepts vectors."""

from __future__ import annotations

import math
import random

import pytest

from pipeline.emulator.embeddings import concepts, vector
from pipeline.retrieval import nearest as nearest_module
from pipeline.retrieval.fusion import RRF_K, reciprocal_rank_fusion
from pipeline.retrieval.nearest import Nearest, cosine
from pipeline.store.documents import pack_vector


def test_rrf_scores_are_the_sum_of_reciprocal_ranks_over_both_rankings() -> None:
    lexical = [10, 11, 12]
    dense = [12, 13, 10]
    fused = dict(reciprocal_rank_fusion([lexical, dense]))
    assert fused == {
        10: 1 / (RRF_K + 1) + 1 / (RRF_K + 3),
        11: 1 / (RRF_K + 2),
        12: 1 / (RRF_K + 3) + 1 / (RRF_K + 1),
        13: 1 / (RRF_K + 2),
    }


def test_rrf_ties_keep_the_order_first_seen_and_a_dense_only_item_is_kept() -> None:
    fused = reciprocal_rank_fusion([["island"], ["census", "island"]])
    # island: 1/61 + 1/62; census (dense only): 1/61: found, after the item both agree on.
    assert [i for i, _ in fused] == ["island", "census"]
    tie = reciprocal_rank_fusion([["a", "b"], ["b", "a"]])
    assert [i for i, _ in tie] == ["a", "b"] and tie[0][1] == tie[1][1]


def test_rrf_of_nothing_is_nothing_and_k_changes_the_weights() -> None:
    assert reciprocal_rank_fusion([[], []]) == []
    assert reciprocal_rank_fusion([["x"]], k=0) == [("x", 1.0)]


def _brute(query: list[float], items: list[tuple[int, list[float]]], limit: int) -> list[int]:
    ranked = sorted(items, key=lambda item: -cosine(query, item[1]))
    return [i for i, _ in ranked[:limit]]


@pytest.mark.parametrize("use_numpy", [True, False], ids=["numpy", "python"])
def test_nearest_over_pages_equals_a_sort_of_every_vector(
    use_numpy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not use_numpy:
        monkeypatch.setattr(nearest_module, "_np", None)
    rng = random.Random(3)
    items = [(i, [rng.uniform(-1, 1) for _ in range(16)]) for i in range(1, 501)]
    query = [rng.uniform(-1, 1) for _ in range(16)]
    found = Nearest(query, 7)
    packed = Nearest(query, 7)  # the same vectors as SQLite stores them: float32 bytes
    for start in range(0, len(items), 64):
        found.offer(items[start : start + 64])
        packed.offer([(i, pack_vector(v)) for i, v in items[start : start + 64]])
    best = found.best()
    assert [i for i, _ in best] == _brute(query, items, 7)
    for item_id, score in best:
        assert math.isclose(score, cosine(query, items[item_id - 1][1]), rel_tol=1e-5)
    assert [i for i, _ in packed.best()] == [i for i, _ in best]


def test_nearest_scores_a_zero_or_wrong_sized_vector_zero() -> None:
    found = Nearest([1.0, 0.0], 3)
    found.offer([(1, [0.0, 0.0]), (2, [1.0, 0.0, 0.0]), (3, [0.5, 0.5])])
    wrong_size = Nearest([1.0, 0.0], 2)
    wrong_size.offer([(1, pack_vector([1.0, 0.0, 0.0])), (2, pack_vector([1.0, 1.0]))])
    assert wrong_size.best() == [(2, pytest.approx(math.sqrt(0.5))), (1, 0.0)]
    assert found.best() == [(3, pytest.approx(math.sqrt(0.5))), (1, 0.0), (2, 0.0)]
    assert Nearest([1.0], 0).best() == []


def test_emulator_vectors_put_words_of_one_family_together() -> None:
    assert concepts("How many residents live in Kraków? (37)") == [
        "population",
        "population",
        "krakow",
    ]
    assert concepts("Krakow counts 804,000 inhabitants") == ["krakow", "count", "population"]
    key = b"k" * 32
    question = vector(key, "How many residents live in the capital of Greenland?", 256)
    census = vector(key, "Nuuk counts about 19,000 inhabitants.", 256)
    ferry = vector(key, "The KRK airport is 11 km from the terminal of the ferry port.", 256)
    assert cosine(question, census) > 0.3 > cosine(question, ferry)
    assert vector(key, "same text", 64) == vector(key, "same text", 64)
    assert vector(key, "same text", 64) != vector(b"j" * 32, "same text", 64)
    assert math.isclose(math.fsum(v * v for v in census), 1.0, rel_tol=1e-5)
