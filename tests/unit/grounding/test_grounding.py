"""Citation mapping (pipeline.grounding): real fixtures, synthetic edge cases, renderers."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pipeline.gemini.wire import (
    Candidate,
    MalformedResponse,
    decode_response,
    visible_text,
)
from pipeline.grounding.mapping import Citation, GroundedAnswer, ground_answer
from pipeline.grounding.render import (
    marker_groups,
    render_html,
    render_html_document,
    render_markdown,
    safe_http_url,
    to_json_dict,
)

GOOGLEAI = "vertexai-sdk-test-data/googleai"
VERTEXAI = "vertexai-sdk-test-data/vertexai"


def load(real_fixtures: Path, rel: str) -> tuple[Candidate, dict[str, Any]]:
    body = (real_fixtures / rel).read_bytes()
    return decode_response(body).candidates[0], json.loads(body)["candidates"][0]


def candidate(
    parts: list[dict[str, Any]],
    supports: list[dict[str, Any]] | None = None,
    chunks: list[dict[str, Any]] | None = None,
    **metadata: Any,
) -> Candidate:
    """A candidate built from wire-shaped dicts, decoded the way a real body would be."""
    cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if supports is not None or chunks is not None or metadata:
        gm: dict[str, Any] = dict(metadata)
        if chunks is not None:
            gm["groundingChunks"] = chunks
        if supports is not None:
            gm["groundingSupports"] = supports
        cand["groundingMetadata"] = gm
    return decode_response(msgspec.json.encode({"candidates": [cand]})).candidates[0]


def web(n: int) -> list[dict[str, Any]]:
    return [{"web": {"uri": f"https://example.com/{i}", "title": f"site{i}.com"}} for i in range(n)]


def seg(text: str, sub: str, *, part: int = 0, occurrence: int = 0) -> dict[str, Any]:
    """A segment naming ``sub`` inside ``text`` by its real UTF-8 byte offsets."""
    data, needle = text.encode(), sub.encode()
    at = -1
    for _ in range(occurrence + 1):
        at = data.index(needle, at + 1)
    s: dict[str, Any] = {"startIndex": at, "endIndex": at + len(needle), "text": sub}
    if part:
        s["partIndex"] = part
    return s


def check_invariants(answer: GroundedAnswer) -> None:
    """What must hold for every mapped answer."""
    covered = [False] * len(answer.text)
    for c in answer.citations:
        assert answer.text[c.start : c.end] == c.text
        assert 0 <= c.start < c.end <= len(answer.text)
        assert c.chunk_indices == tuple(sorted(set(c.chunk_indices)))
        assert all(0 <= i < len(answer.sources) for i in c.chunk_indices)
        if c.confidence_scores is not None:
            assert len(c.confidence_scores) == len(c.chunk_indices)
        for i in range(c.start, c.end):
            covered[i] = True
    gaps = [i for i, v in enumerate(covered) if not v]
    assert sum(e - s for s, e in answer.unsupported_spans) == len(gaps)
    for s, e in answer.unsupported_spans:
        assert not any(covered[s:e])
        assert s == 0 or covered[s - 1]
        assert e == len(answer.text) or covered[e]
    if answer.text:
        assert answer.coverage == pytest.approx(sum(covered) / len(answer.text))
    else:
        assert answer.coverage == 0.0


# --------------------------------------------------------------------------------------------
# Real fixtures
# --------------------------------------------------------------------------------------------


def grounded_fixtures(root: Path) -> list[Path]:
    found = []
    for path in sorted(root.rglob("*.json")):
        try:
            response = decode_response(path.read_bytes())
        except MalformedResponse:
            continue
        if any(c.grounding_metadata is not None for c in response.candidates):
            found.append(path)
    return found


def test_every_grounded_fixture_maps_exactly(real_fixtures: Path) -> None:
    paths = grounded_fixtures(real_fixtures)
    assert len(paths) >= 11  # the table in fixtures/real/README.md lists 11 unary ones
    total_supports = total_citations = 0
    for path in paths:
        body = path.read_bytes()
        raw = json.loads(body)
        for n, cand in enumerate(decode_response(body).candidates):
            if cand.grounding_metadata is None:
                continue
            answer = ground_answer(cand)
            check_invariants(answer)
            assert answer.grounded
            assert answer.text == visible_text(cand)
            raw_supports = raw["candidates"][n]["groundingMetadata"].get("groundingSupports", [])
            total_supports += len(raw_supports)
            total_citations += len(answer.citations)
            for c in answer.citations:
                seg_text = raw_supports[c.support_index]["segment"].get("text")
                if seg_text is not None:
                    assert c.text == seg_text, path
                part = raw["candidates"][n]["content"]["parts"][c.part_index]["text"]
                assert part.encode()[c.byte_start : c.byte_end].decode() == c.text
    assert total_supports == 68  # 73 in the README minus the 5 in the two streams
    # Dropped: googleai mixed-validity 2, vertexai mixed-validity 4, missing-retrievedurl 1.
    assert total_citations == 68 - 7


def test_search_grounding_first_segment_without_start_index(real_fixtures: Path) -> None:
    cand, raw = load(real_fixtures, f"{GOOGLEAI}/unary-success-google-search-grounding.json")
    assert "startIndex" not in raw["groundingMetadata"]["groundingSupports"][0]["segment"]
    answer = ground_answer(cand)
    assert answer.warnings == ()
    assert len(answer.citations) == 3
    first = answer.citations[0]
    assert (first.byte_start, first.start) == (0, 0)
    assert first.text == "The current weather in London, United Kingdom is cloudy."
    # '°' before the later segments: byte and code point offsets part ways.
    assert [c.byte_start - c.start for c in answer.citations] == [0, 0, 4]
    assert [c.chunk_indices for c in answer.citations] == [(0,), (1,), (1,)]
    assert answer.citations[0].confidence_scores == pytest.approx((0.717345,))
    assert answer.web_search_queries == ("current weather in London",)
    assert answer.search_entry_point_html is not None
    assert answer.search_entry_point_html.startswith("<style>")
    assert [s.kind for s in answer.sources] == ["web", "web"]
    assert answer.sources[1].uri == "https://www.google.com/search?q=weather+in+London"


def test_vertex_maps_all_39_supports_mapped(real_fixtures: Path) -> None:
    cand, raw = load(real_fixtures, f"{VERTEXAI}/unary-success-google-maps-grounding.json")
    answer = ground_answer(cand)
    assert len(raw["groundingMetadata"]["groundingSupports"]) == 39
    assert len(answer.citations) == 39
    assert answer.warnings == ()
    # README: 33 of 39 supports read differently as code point offsets.
    assert sum((c.byte_start, c.byte_end) != (c.start, c.end) for c in answer.citations) == 33
    assert {s.kind for s in answer.sources} == {"maps"}
    assert all(s.place_id and s.place_id.startswith("places/") for s in answer.sources)
    assert answer.retrieval_queries
    assert all(c.confidence_scores is not None for c in answer.citations)


def test_url_context_one_byte_off_recovered_by_search(real_fixtures: Path) -> None:
    cand, raw = load(real_fixtures, f"{GOOGLEAI}/unary-success-url-context.json")
    answer = ground_answer(cand)
    wire = [s["segment"] for s in raw["groundingMetadata"]["groundingSupports"]]
    assert len(answer.citations) == 4
    for c, s in zip(answer.citations, wire, strict=True):
        assert c.text == s["text"]
        assert (c.byte_start, c.byte_end) == (s["startIndex"] - 1, s["endIndex"] - 1)
        assert c.confidence_scores is None
    assert len(answer.warnings) == 4
    assert all("shift -1" in w for w in answer.warnings)


@pytest.mark.parametrize(
    ("rel", "supports", "kept"),
    [
        (f"{GOOGLEAI}/unary-success-url-context-mixed-validity.json", 3, 1),
        (f"{VERTEXAI}/unary-success-url-context-mixed-validity.json", 6, 2),
    ],
)
def test_mixed_validity_out_of_range_indices_warned(
    real_fixtures: Path, rel: str, supports: int, kept: int
) -> None:
    cand, _ = load(real_fixtures, rel)
    answer = ground_answer(cand)
    assert len(cand.grounding_metadata.grounding_supports) == supports  # type: ignore[union-attr]
    assert len(answer.citations) == kept
    assert all(c.chunk_indices == (0,) for c in answer.citations)
    out_of_range = [w for w in answer.warnings if "out of range (1 grounding chunks)" in w]
    dropped = [w for w in answer.warnings if "no valid chunk index left" in w]
    assert len(out_of_range) == len(dropped) == supports - kept


def test_missing_grounding_chunks_drops_the_support(real_fixtures: Path) -> None:
    cand, _ = load(real_fixtures, f"{VERTEXAI}/unary-success-url-context-missing-retrievedurl.json")
    answer = ground_answer(cand)
    assert answer.grounded
    assert answer.citations == ()
    assert answer.sources == ()
    assert answer.coverage == 0.0
    assert answer.unsupported_spans == ((0, len(answer.text)),)
    assert "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 out of range (0 grounding chunks)" in answer.warnings[0]


def test_empty_grounding_chunks(real_fixtures: Path) -> None:
    rel = f"{GOOGLEAI}/unary-success-google-search-grounding-empty-grounding-chunks.json"
    answer = ground_answer(load(real_fixtures, rel)[0])
    assert [s.kind for s in answer.sources] == ["other", "other"]
    assert all(s.uri is None and s.title is None for s in answer.sources)
    assert len(answer.citations) == 1
    assert answer.citations[0].chunk_indices == (0,)
    # No destination: the marker is plain text and no definition is written.
    md = render_markdown(answer)
    assert "[1]" in md
    assert "[1]:" not in md
    assert "<a " not in render_html(answer).split('<ol class="sources">')[0]


def test_min_confidence_on_real_scores(real_fixtures: Path) -> None:
    cand, _ = load(real_fixtures, "cookbook/search_grounding_response_1.json")
    everything = ground_answer(cand)
    scores = [s for c in everything.citations for s in c.confidence_scores or ()]
    assert len(everything.citations) == 2
    assert len(scores) == 2
    cut = (min(scores) + max(scores)) / 2
    filtered = ground_answer(cand, min_confidence=cut)
    assert len(filtered.citations) == 1
    assert all(s >= cut for s in filtered.citations[0].confidence_scores or ())
    assert any("min_confidence" in w for w in filtered.warnings)
    assert ground_answer(cand, min_confidence=0.0).citations == everything.citations


def test_min_confidence_without_scores_warns_and_keeps(real_fixtures: Path) -> None:
    cand, _ = load(real_fixtures, f"{GOOGLEAI}/unary-success-google-maps-grounding.json")
    plain = ground_answer(cand)
    filtered = ground_answer(cand, min_confidence=0.9)
    assert filtered.citations == plain.citations
    assert len(filtered.citations) == 4
    assert filtered.warnings[-1].startswith("min_confidence=0.9: no support carries")


# --------------------------------------------------------------------------------------------
# Synthetic cases
# --------------------------------------------------------------------------------------------


def test_no_grounding_metadata() -> None:
    answer = ground_answer(candidate([{"text": "Paris is the capital of France."}]))
    assert not answer.grounded
    assert answer.citations == answer.sources == ()
    assert answer.coverage == 0.0
    assert answer.unsupported_spans == ((0, 31),)
    assert answer.search_entry_point_html is None
    assert answer.warnings == ()
    assert render_markdown(answer) == answer.text
    d = to_json_dict(answer)
    assert d["grounded"] is False
    assert d["citations"] == []


def test_empty_grounding_metadata_is_grounded() -> None:
    answer = ground_answer(candidate([{"text": "x"}], webSearchQueries=["q", ""]))
    assert answer.grounded
    assert answer.citations == ()
    assert answer.web_search_queries == ("q", "")


def test_empty_answer() -> None:
    answer = ground_answer(candidate([], supports=[], chunks=web(1)))
    assert answer.text == ""
    assert answer.coverage == 0.0
    assert answer.unsupported_spans == ()


def test_omitted_zeros() -> None:
    text = "Zürich is in Switzerland."
    answer = ground_answer(
        candidate(
            [{"text": text}],
            supports=[
                {"segment": {"endIndex": 7, "text": "Zürich"}, "groundingChunkIndices": []},
                {"segment": {"endIndex": 7, "text": "Zürich"}},  # chunk indices omitted too
                {"segment": {"endIndex": 7, "text": "Zürich"}, "groundingChunkIndices": [0]},
            ],
            chunks=web(1),
        )
    )
    assert len(answer.citations) == 1
    c = answer.citations[0]
    assert (c.part_index, c.byte_start, c.byte_end, c.start, c.end) == (0, 0, 7, 0, 6)
    assert c.support_index == 2
    assert sum("no valid chunk index" in w for w in answer.warnings) == 2


def test_multi_part_with_part_index() -> None:
    p0, p1, p2 = "Première partie. ", "Deuxième: 東京 is big. ", "Third 🎉 part."
    supports = [
        {"segment": seg(p0, "Première partie."), "groundingChunkIndices": [0]},
        {"segment": seg(p1, "東京 is big.", part=1), "groundingChunkIndices": [1]},
        {"segment": seg(p2, "part.", part=2), "groundingChunkIndices": [0, 1]},
    ]
    answer = ground_answer(candidate([{"text": p0}, {"text": p1}, {"text": p2}], supports, web(2)))
    check_invariants(answer)
    assert answer.text == p0 + p1 + p2
    assert [c.text for c in answer.citations] == ["Première partie.", "東京 is big.", "part."]
    assert [c.part_index for c in answer.citations] == [0, 1, 2]
    assert answer.citations[1].start == len(p0) + p1.index("東京")
    assert answer.citations[2].start == len(p0) + len(p1) + p2.index("part.")
    # Byte offsets stay per part.
    assert answer.citations[1].byte_start == p1.encode().index("東京".encode())


def test_thought_part_before_answer_is_not_renumbered() -> None:
    thought = "Let me think about Paris…"
    answer_text = "Paris is in France."
    supports = [
        {"segment": seg(answer_text, "Paris is in France.", part=1), "groundingChunkIndices": [0]},
        # Offsets counted in the thought part, partIndex absent: they run over the visible
        # text, where they read nothing; the text is found in the answer all the same.
        {"segment": seg(thought, "Paris"), "groundingChunkIndices": [0]},
        # Names the thought part, no text to check: dropped, and the warning says why.
        {"segment": {"partIndex": 0, "endIndex": 5}, "groundingChunkIndices": [0]},
    ]
    answer = ground_answer(
        candidate([{"text": thought, "thought": True}, {"text": answer_text}], supports, web(1))
    )
    assert answer.text == answer_text
    assert [(c.support_index, c.part_index, c.start, c.end) for c in answer.citations] == [
        (1, 1, 0, 5),
        (0, 1, 0, len(answer_text)),
    ]
    assert answer.warnings == (
        "support 1: bytes [19, 24) of the visible text do not read the segment text;"
        " matched it at [0, 5) (shift -19)",
        "support 2: part 0 is a thought part and there is no segment text to place it by; dropped",
    )


def test_segment_on_missing_or_textless_part() -> None:
    parts = [{"text": "Hello world."}, {"functionCall": {"name": "f", "args": {}}}]
    supports = [
        {"segment": {"partIndex": 1, "endIndex": 5, "text": "Hello"}, "groundingChunkIndices": [0]},
        {"segment": {"partIndex": 7, "endIndex": 5, "text": "Hello"}, "groundingChunkIndices": [0]},
        {"segment": {"partIndex": -1, "endIndex": 5}, "groundingChunkIndices": [0]},
        {"segment": {"endIndex": 5, "text": "Hello"}, "groundingChunkIndices": [0]},
    ]
    answer = ground_answer(candidate(parts, supports, web(1)))
    # A partIndex naming no text part leaves the visible text as the only reading: where the
    # segment text checks the offsets there, the support is kept; without text, dropped.
    assert [(c.support_index, c.text, c.offsets_over) for c in answer.citations] == [
        (0, "Hello", "answer"),
        (1, "Hello", "answer"),
        (3, "Hello", "answer"),
    ]
    assert answer.warnings == (
        "support 0: part index 1 given, but bytes [0, 5) read the segment text over the"
        " visible text; placed there",
        "support 1: part index 7 given, but bytes [0, 5) read the segment text over the"
        " visible text; placed there",
        "support 2: part index -1 out of range (2 parts) and there is no segment text to"
        " place it by; dropped",
    )


def test_overlapping_and_nested_supports_all_kept() -> None:
    text = "Alpha beta gamma delta."
    supports = [
        {"segment": seg(text, "Alpha beta gamma delta."), "groundingChunkIndices": [0]},
        {"segment": seg(text, "beta gamma"), "groundingChunkIndices": [1]},
        {"segment": seg(text, "gamma delta."), "groundingChunkIndices": [2]},
        {"segment": seg(text, "beta gamma"), "groundingChunkIndices": [1]},  # exact duplicate
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(3)))
    check_invariants(answer)
    assert len(answer.citations) == 4
    assert answer.coverage == 1.0
    assert answer.unsupported_spans == ()
    # Sorted by (start, end), duplicates in wire order.
    assert [c.support_index for c in answer.citations] == [0, 1, 3, 2]
    groups = marker_groups(answer)
    assert groups == [(16, (1,)), (23, (0, 2))]
    assert render_markdown(answer).split("\n")[0] == "Alpha beta gamma[2] delta.[1] [3]"


def test_out_of_range_and_duplicate_indices() -> None:
    text = "One. Two."
    supports = [
        {
            "segment": seg(text, "One."),
            "groundingChunkIndices": [2, 5, 0, 2, -1],
            "confidenceScores": [0.7, 0.9, 0.6, 0.1, 0.9],
        },
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(3)))
    c = answer.citations[0]
    assert c.chunk_indices == (0, 2)
    assert c.confidence_scores == pytest.approx((0.6, 0.7))  # first occurrence of 2 wins
    assert answer.warnings == (
        "support 0: chunk indices 5, -1 out of range (3 grounding chunks); ignored",
    )


def test_confidence_scores_absent_empty_or_not_parallel() -> None:
    text = "A. B. C."
    supports = [
        {"segment": seg(text, "A."), "groundingChunkIndices": [0]},
        {"segment": seg(text, "B."), "groundingChunkIndices": [0], "confidenceScores": []},
        {"segment": seg(text, "C."), "groundingChunkIndices": [0], "confidenceScores": [0.5, 1]},
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(1)), min_confidence=0.6)
    assert [c.confidence_scores for c in answer.citations] == [None, None, None]
    assert len(answer.citations) == 3
    assert "2 confidence scores for 1 chunk indices" in answer.warnings[0]
    assert "nothing filtered" in answer.warnings[1]


def test_min_confidence_filters_only_where_scores_present() -> None:
    text = "A. B. C."
    supports = [
        {"segment": seg(text, "A."), "groundingChunkIndices": [0]},
        {
            "segment": seg(text, "B."),
            "groundingChunkIndices": [0, 1],
            "confidenceScores": [0.4, 0.8],
        },
        {"segment": seg(text, "C."), "groundingChunkIndices": [1], "confidenceScores": [0.3]},
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(2)), min_confidence=0.5)
    assert [(c.text, c.chunk_indices) for c in answer.citations] == [("A.", (0,)), ("B.", (1,))]
    assert answer.citations[1].confidence_scores == pytest.approx((0.8,))
    assert answer.warnings == (
        "min_confidence=0.5: dropped 2 chunk reference(s) scored below it and 1 citation(s)"
        " left with none",
    )
    with pytest.raises(ValueError, match="NaN"):
        ground_answer(candidate([{"text": text}], supports, web(2)), min_confidence=float("nan"))


def test_boundary_inside_multibyte_char_falls_back_to_search() -> None:
    text = "Café ☕ au lait. Café ☕ au lait."
    data = text.encode()
    second = data.index("☕".encode(), 8)
    supports = [
        # Starts one byte into the second '☕' (3 bytes): cannot decode; text is there twice,
        # the occurrence nearest the given start wins.
        {
            "segment": {"startIndex": second + 1, "endIndex": second + 4, "text": "☕"},
            "groundingChunkIndices": [0],
        },
        # Same cut without text: dropped.
        {
            "segment": {"startIndex": second + 1, "endIndex": second + 3},
            "groundingChunkIndices": [0],
        },
        # End inside 'é' without text: dropped.
        {"segment": {"startIndex": 0, "endIndex": 4}, "groundingChunkIndices": [0]},
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(1)))
    assert len(answer.citations) == 1
    c = answer.citations[0]
    assert (c.byte_start, c.start, c.text) == (second, text.index("☕", 8), "☕")
    assert "matched it at" in answer.warnings[0]
    assert "not a non-empty span on character boundaries" in answer.warnings[1]
    assert "not a non-empty span on character boundaries" in answer.warnings[2]


def test_missing_segment_text_trusts_offsets_on_boundaries() -> None:
    text = "Ελληνικά: γεια σου."
    supports = [
        {
            "segment": {"startIndex": 0, "endIndex": len("Ελληνικά".encode())},
            "groundingChunkIndices": [0],
        },
        {"segment": {"startIndex": 5, "endIndex": 3}, "groundingChunkIndices": [0]},  # reversed
        {"segment": {"startIndex": 0, "endIndex": 999}, "groundingChunkIndices": [0]},  # too long
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(1)))
    assert [c.text for c in answer.citations] == ["Ελληνικά"]
    assert len(answer.warnings) == 2


def test_segment_text_not_found_or_empty() -> None:
    text = "The sky is blue."
    supports = [
        {"segment": {"startIndex": 4, "endIndex": 7, "text": "sea"}, "groundingChunkIndices": [0]},
        {"segment": {"startIndex": 4, "endIndex": 4, "text": ""}, "groundingChunkIndices": [0]},
        {
            "segment": {"startIndex": 999, "endIndex": 1002, "text": "sky"},
            "groundingChunkIndices": [0],
        },
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(1)))
    assert [(c.start, c.end) for c in answer.citations] == [(4, 7)]
    assert "the text is nowhere in the answer; dropped: 'sea'" in answer.warnings[0]
    assert answer.warnings[1] == "support 1: segment text is empty; dropped"
    assert "shift -995" in answer.warnings[2]


def test_fallback_takes_the_occurrence_nearest_the_given_start() -> None:
    text = "**a** b **c** d **e**"
    # "**" occurs six times; the given start is near the fourth (index 11 in bytes).
    supports = [
        {"segment": {"startIndex": 10, "endIndex": 12, "text": "**"}, "groundingChunkIndices": [0]}
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(1)))
    assert answer.citations[0].start == 11  # |11-10| = 1 beats |8-10| = 2


def test_sources_of_every_kind() -> None:
    chunks = [
        {"web": {"uri": "https://a.example/x", "title": "a.example", "domain": "a.example"}},
        {
            "retrievedContext": {
                "uri": "gs://bucket/doc.pdf",
                "title": "Doc",
                "text": "chunk text",
                "documentName": "projects/p/locations/global/dataStores/d/documents/1",
            }
        },
        {"maps": {"uri": "https://maps.google.com/?cid=1", "title": "Café", "placeId": "places/X"}},
        {},
    ]
    answer = ground_answer(candidate([{"text": "x"}], [], chunks))
    kinds = [(s.index, s.kind) for s in answer.sources]
    assert kinds == [(0, "web"), (1, "retrievedContext"), (2, "maps"), (3, "other")]
    assert answer.sources[0].domain == "a.example"
    assert answer.sources[1].document_name is not None
    assert answer.sources[1].text == "chunk text"
    assert answer.sources[2].place_id == "places/X"


def test_citation_is_frozen() -> None:
    c = Citation(0, 0, 1, 0, 1, "x", (0,), None)
    with pytest.raises(AttributeError):
        c.start = 3  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# Renderers
# --------------------------------------------------------------------------------------------


def hostile_answer() -> GroundedAnswer:
    text = 'Use <script>alert("x")</script> & "quotes" carefully. Then [link](javascript:x). End'
    supports = [
        {
            "segment": seg(text, 'Use <script>alert("x")</script> & "quotes" carefully.'),
            "groundingChunkIndices": [0, 1],
        },
        {"segment": seg(text, "Then [link](javascript:x)."), "groundingChunkIndices": [2]},
    ]
    chunks = [
        {"web": {"uri": 'https://ex.com/a?b=1&c="2"<x>', "title": 'Ti"tle <b>\\ & co\nnext'}},
        {"web": {"uri": "javascript:alert(1)", "title": "evil"}},
        {"web": {"uri": "https://ex.com/redirect", "title": "ex.com"}},
    ]
    return ground_answer(
        candidate(
            [{"text": text}],
            supports,
            chunks,
            searchEntryPoint={
                "renderedContent": '<style>.c{color:red}</style><div class="c">"q" & a</div>'
            },
        )
    )


def test_markdown_markers_and_definitions() -> None:
    answer = hostile_answer()
    md = render_markdown(answer, destinations={2: "https://real.example/page"})
    body, defs = md.split("\n\n")
    # Model text shows as text: its HTML escaped, its link reduced to the link's text.
    assert body == (
        'Use \\<script>alert("x")\\</script> & "quotes" carefully.[1] [2] Then link.[3] End'
    )
    assert defs.splitlines() == [
        '[1]: <https://ex.com/a?b=1&c="2"%3Cx%3E> "Ti\\"tle <b>\\\\ & co next"',
        '[3]: <https://real.example/page> "ex.com"',
    ]


def test_markdown_marker_next_to_brackets_and_parens() -> None:
    text = "See [x]. Word(note) after[2] end"
    supports = [
        {"segment": seg(text, "See [x]"), "groundingChunkIndices": [0]},
        {"segment": seg(text, "Word"), "groundingChunkIndices": [0]},
        {"segment": seg(text, "after"), "groundingChunkIndices": [1]},
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(2)))
    body = render_markdown(answer).split("\n\n")[0]
    assert body == "See \\[x\\][1]. Word[1]\\(note) after[2]\\[2\\] end"


def test_markdown_marker_after_trailing_whitespace_and_combining_mark() -> None:
    text = "Cafe\u0301 au lait.\n\nNext"
    supports = [
        {"segment": seg(text, "Cafe"), "groundingChunkIndices": [0]},  # cuts before U+0301
        {"segment": seg(text, "au lait.\n\n"), "groundingChunkIndices": [0]},
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(1)))
    assert render_markdown(answer).startswith("Cafe\u0301[1] au lait.[1]\n\nNext\n\n[1]: <")


def test_html_escapes_answer_and_sandboxes_entry_point() -> None:
    answer = hostile_answer()
    fragment = render_html(answer, destinations={2: "https://real.example/page"})
    assert "<script>" not in fragment
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &quot;quotes&quot;" in fragment
    # Only http(s) links: the javascript: chunk is plain text.
    hrefs = re.findall(r'href="([^"]*)"', fragment)
    assert all(html.unescape(h).startswith("https://") for h in hrefs)
    assert "javascript:alert" not in " ".join(hrefs)
    assert '<a href="https://ex.com/a?b=1&amp;c=&quot;2&quot;&lt;x&gt;"' in fragment
    assert '<a href="https://real.example/page"' in fragment
    # The unsupported tail " End" is wrapped; whitespace-only gaps are not.
    assert '<span class="unsupported"> End</span>' in fragment
    # Entry point: verbatim inside srcdoc, attribute-escaped, sandboxed without scripts.
    m = re.search(r'<iframe [^>]*sandbox="([^"]*)" srcdoc="([^"]*)"></iframe>', fragment)
    assert m is not None
    assert "allow-scripts" not in m.group(1) and "allow-same-origin" not in m.group(1)
    # The content as sent, after the <base> that opens its links in a new tab.
    assert html.unescape(m.group(2)) == '<base target="_blank">' + answer.search_entry_point_html
    assert "allow-scripts" not in fragment
    doc = render_html_document(answer)
    assert doc.startswith("<!DOCTYPE html>")
    assert "script-src 'none'" in doc


def test_html_visible_text_round_trips() -> None:
    answer = hostile_answer()
    fragment = render_html(answer)
    m = re.search(r'<div class="answer">(.*?)</div>\n', fragment, re.S)
    assert m is not None
    visible = re.sub(r"<sup class=\"cite\">.*?</sup>", "", m.group(1), flags=re.S)
    visible = re.sub(r"</?span[^>]*>", "", visible)
    assert html.unescape(visible) == answer.text


def test_json_dict_keys() -> None:
    d = to_json_dict(hostile_answer())
    assert set(d) >= {
        "grounded",
        "text",
        "citations",
        "sources",
        "coverage",
        "unsupported_spans",
        "web_search_queries",
        "retrieval_queries",
        "warnings",
    }
    assert set(d["citations"][0]) >= {"start", "end", "text", "chunk_indices", "confidence_scores"}
    assert set(d["sources"][0]) >= {"index", "kind", "title", "uri"}
    json.dumps(d)  # plain JSON types only


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://example.com/x", True),
        ("HTTP://EXAMPLE.COM", True),
        ("javascript:alert(1)", False),
        (" https://example.com", False),
        ("https://exa\nmple.com", False),
        ("//example.com/x", False),
        ("data:text/html,hi", False),
        ("https://", False),
        ("https://[::1", False),
        (None, False),
    ],
)
def test_safe_http_url(url: str | None, ok: bool) -> None:
    assert (safe_http_url(url) is not None) is ok


def test_destinations_override_only_when_http() -> None:
    text = "Fact one. Fact two."
    supports = [
        {"segment": seg(text, "Fact one."), "groundingChunkIndices": [0]},
        {"segment": seg(text, "Fact two."), "groundingChunkIndices": [1]},
    ]
    answer = ground_answer(candidate([{"text": text}], supports, web(2)))
    dest = {0: "javascript:alert(1)", 1: "https://resolved.example/two"}
    md = render_markdown(answer, destinations=dest)
    assert "[1]: <https://example.com/0>" in md
    assert "[2]: <https://resolved.example/two>" in md
    fragment = render_html(answer, destinations=dest)
    assert "javascript" not in fragment
    assert 'href="https://resolved.example/two"' in fragment
