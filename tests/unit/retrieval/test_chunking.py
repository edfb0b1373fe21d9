"""Chunking on paragraph and sentence boundaries with a bounded overlap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.retrieval.chunking import chunk_spans

TEXT = (
    "Kraków Airport lies 11 km west of the Old Town. Trains run every 30 minutes.\n\n"
    "Katowice Airport is the second choice, 100 km away. Buses connect both.\n\n"
    "Rzeszów is further still."
)


def test_chunks_end_on_sentences_and_fit_the_size() -> None:
    spans = chunk_spans(TEXT, 90, 0)
    texts = [TEXT[s:e] for s, e in spans]
    assert texts == [
        "Kraków Airport lies 11 km west of the Old Town. Trains run every 30 minutes.",
        "Katowice Airport is the second choice, 100 km away. Buses connect both.",
        "Rzeszów is further still.",
    ]


def test_overlap_repeats_whole_sentences_of_the_chunk_before() -> None:
    spans = chunk_spans(TEXT, 100, 40)
    texts = [TEXT[s:e] for s, e in spans]
    assert texts[0].endswith("Trains run every 30 minutes.")
    assert texts[1].startswith("Trains run every 30 minutes.")


def test_a_run_without_spaces_is_cut_hard() -> None:
    text = "東京" * 300
    spans = chunk_spans(text, 100, 0)
    assert [e - s for s, e in spans] == [100] * 6


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        chunk_spans("x", 10, 10)


@given(
    st.text(alphabet=st.sampled_from("ab .\n東"), max_size=600),
    st.integers(5, 120),
    st.integers(0, 60),
)
def test_chunks_cover_the_text_in_order_within_the_size(text: str, size: int, overlap: int) -> None:
    overlap = min(overlap, size - 1)
    spans = chunk_spans(text, size, overlap)
    covered = set()
    last_start = -1
    for s, e in spans:
        assert 0 < e - s <= size
        assert s > last_start
        last_start = s
        covered.update(range(s, e))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())
