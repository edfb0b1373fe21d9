"""Every response shape real recordings show: decoded without error, every support placed.

The hand-built fixtures in ``tests/fixtures/shapes`` (sources in its README) carry the shapes
real recordings show (Gemini 3 tool parts, code execution, File Search, URL context, legacy
dynamic retrieval); the real recordings, when present beside the checkout, must keep mapping
too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pipeline.gemini.wire import Candidate, decode_response, tool_part_count, visible_text
from pipeline.grounding.mapping import GroundedAnswer, ground_answer
from tests.support.paths import SHAPES

ALL = sorted(p.name for p in SHAPES.glob("*.json"))


def load(name: str) -> tuple[Candidate, dict[str, Any]]:
    body = (SHAPES / name).read_bytes()
    return decode_response(body).candidates[0], json.loads(body)["candidates"][0]


def placed_exactly(answer: GroundedAnswer, raw: dict[str, Any]) -> None:
    """Every support whose text occurs in the answer is cited exactly on that text."""
    supports = raw.get("groundingMetadata", {}).get("groundingSupports", [])
    by_support = {c.support_index: c for c in answer.citations}
    for n, s in enumerate(supports):
        text = s["segment"]["text"]
        assert text in answer.text
        c = by_support[n]
        assert answer.text[c.start : c.end] == text == c.text
    assert len(answer.citations) == len(supports)


@pytest.mark.parametrize("name", ALL)
def test_every_shape_decodes_and_maps(name: str) -> None:
    cand, raw = load(name)
    answer = ground_answer(cand)
    assert answer.text == visible_text(cand)
    placed_exactly(answer, raw)


def test_gemini3_tool_call_parts_first() -> None:
    cand, raw = load("gemini3-toolcall-first.json")
    parts = cand.content.parts
    assert parts[0].tool_call is not None and parts[1].tool_response is not None
    assert all(p.thought_signature for p in parts)
    assert all(
        "partIndex" not in s["segment"] for s in raw["groundingMetadata"]["groundingSupports"]
    )
    answer = ground_answer(cand)
    assert answer.warnings == ()
    assert answer.tool_parts == 2 == tool_part_count(cand)
    assert [c.offsets_over for c in answer.citations] == ["answer", "answer"]
    # The text part is part 2; the em dash makes bytes and code points part ways.
    second = answer.citations[1]
    assert second.part_index == 2
    assert second.byte_end - second.byte_start == len(second.text.encode())
    assert second.end - second.start == len(second.text)


def test_code_execution_parts_first_answer_in_two_text_parts() -> None:
    cand, _ = load("code-execution-first.json")
    answer = ground_answer(cand)
    assert answer.warnings == ()
    assert answer.tool_parts == 4
    assert [c.part_index for c in answer.citations] == [4, 5]
    assert [c.byte_start for c in answer.citations] == [0, 0]  # relative to their own part


def test_two_text_parts_same_text_at_two_offsets() -> None:
    cand, _ = load("two-text-parts-no-part-index.json")
    answer = ground_answer(cand)
    assert answer.warnings == ()
    first, _, third = sorted(answer.citations, key=lambda c: c.support_index)
    assert first.text == third.text and first.start == 0
    assert third.start == answer.text.index(third.text, 1)
    assert third.part_index == 1


def test_file_search_chunks_keep_store_metadata_and_text() -> None:
    cand, _ = load("file-search.json")
    answer = ground_answer(cand)
    assert [s.kind for s in answer.sources] == ["retrievedContext"] * 3
    s0 = answer.sources[0]
    assert s0.uri is None and s0.text and s0.title == "warranty-2026.pdf"
    assert s0.file_search_store == "fileSearchStores/product-docs-k2j4h5"
    assert s0.custom_metadata == (
        {"key": "product", "stringValue": "X200"},
        {"key": "year", "numericValue": 2026},
    )
    cited = {i for c in answer.citations for i in c.chunk_indices}
    assert cited == {0, 1}  # the third chunk is kept though nothing cites it


def test_maps_widget_token_kept() -> None:
    cand, _ = load("maps-widget-token.json")
    answer = ground_answer(cand)
    assert answer.maps_widget_token == "widgetcontent/AcBXPQhandbuiltTOKEN"
    assert [s.place_id for s in answer.sources] == [
        "places/ChIJhandbuilt0001",
        "places/ChIJhandbuilt0002",
    ]


def test_legacy_dynamic_retrieval_score_and_zero_confidence() -> None:
    cand, _ = load("legacy-dynamic-retrieval.json")
    answer = ground_answer(cand)
    assert answer.dynamic_retrieval_score == pytest.approx(0.93447)
    assert answer.citations[0].confidence_scores == (0.0,)


def test_url_context_one_byte_high_recovered_and_statuses_kept() -> None:
    cand, raw = load("url-context-one-byte-high.json")
    answer = ground_answer(cand)
    wire = [s["segment"] for s in raw["groundingMetadata"]["groundingSupports"]]
    for c, s in zip(answer.citations, wire, strict=True):
        assert (c.byte_start, c.byte_end) == (s.get("startIndex", 0) - 1, s["endIndex"] - 1)
    assert all("shift -1" in w for w in answer.warnings) and len(answer.warnings) == 2
    assert answer.url_statuses == (
        ("https://api.example.org/docs", "URL_RETRIEVAL_STATUS_SUCCESS"),
        ("https://api.example.org/missing", "URL_RETRIEVAL_STATUS_ERROR"),
    )


def test_vertex_web_domain_and_empty_chunk() -> None:
    cand, _ = load("vertex-web-domain.json")
    answer = ground_answer(cand)
    assert [(s.kind, s.domain) for s in answer.sources] == [
        ("web", "nationalgeographic.com"),
        ("other", None),
    ]
    assert answer.dynamic_retrieval_score is None  # retrievalMetadata: {}


def test_search_queries_without_chunks() -> None:
    cand, _ = load("search-queries-no-chunks.json")
    answer = ground_answer(cand)
    assert answer.grounded and answer.citations == () and answer.sources == ()
    assert answer.web_search_queries == ("tallest building 2026",)
    assert answer.text == "The tallest building is the Burj Khalifa."


# --------------------------------------------------------------------------------------------
# How an explicit partIndex interacts with the rule: both readings, the exact one preferred
# --------------------------------------------------------------------------------------------


def _cand(parts: list[dict[str, Any]], supports: list[dict[str, Any]]) -> Candidate:
    gm = {"groundingChunks": [{"web": {"uri": "https://x.example", "title": "x"}}]}
    gm["groundingSupports"] = supports
    body = {"candidates": [{"content": {"parts": parts}, "groundingMetadata": gm}]}
    return decode_response(msgspec.json.encode(body)).candidates[0]


def test_explicit_part_index_reads_within_the_part_first() -> None:
    parts = [{"text": "Zürich. "}, {"text": "Bern is the capital."}]
    s = {"segment": {"partIndex": 1, "endIndex": 4, "text": "Bern"}, "groundingChunkIndices": [0]}
    answer = ground_answer(_cand(parts, [s]))
    c = answer.citations[0]
    assert (c.offsets_over, c.part_index, c.start, c.text) == ("part", 1, 8, "Bern")
    assert answer.warnings == ()


def test_explicit_part_index_with_offsets_over_the_whole_text() -> None:
    # partIndex 1 but offsets counted over the joined text ("Zürich. " is 9 bytes): the
    # part reading is out of range, the visible-text reading matches exactly and wins.
    parts = [{"text": "Zürich. "}, {"text": "Bern is the capital."}]
    s = {"segment": {"partIndex": 1, "startIndex": 9, "endIndex": 13, "text": "Bern"}}
    s["groundingChunkIndices"] = [0]
    answer = ground_answer(_cand(parts, [s]))
    c = answer.citations[0]
    assert (c.offsets_over, c.part_index, c.byte_start, c.start) == ("answer", 1, 0, 8)
    assert "read the segment text over the visible text" in answer.warnings[0]


def test_named_part_wins_over_the_same_words_in_another_part() -> None:
    # partIndex 2, offsets 1 byte short: the visible-text reading slices the same digits
    # exactly, but in part 1. The named part holds them near its offsets: placed there.
    parts = [{"text": "aa\r\n❤️00000000"}, {"text": "a\r\n\r\n000ࠀ00000000"}]
    s = {"segment": {"partIndex": 1, "startIndex": 10, "endIndex": 18, "text": "00000000"}}
    s["groundingChunkIndices"] = [0]
    answer = ground_answer(_cand(parts, [s]))
    c = answer.citations[0]
    assert (c.offsets_over, c.part_index, c.byte_start, c.byte_end) == ("part", 1, 11, 19)
    assert answer.text[c.start : c.end] == "00000000"
    assert c.start == len(parts[0]["text"]) + 9
    assert "(shift +1)" in answer.warnings[0]


def test_support_dropped_only_when_its_text_is_nowhere_in_the_answer() -> None:
    parts = [{"toolCall": {"id": "1"}}, {"text": "Alpha beta."}]
    supports = [
        {
            "segment": {"startIndex": 50, "endIndex": 55, "text": "beta."},
            "groundingChunkIndices": [0],
        },
        {"segment": {"endIndex": 5, "text": "Gamma"}, "groundingChunkIndices": [0]},
    ]
    answer = ground_answer(_cand(parts, supports))
    assert [c.text for c in answer.citations] == ["beta."]
    assert answer.warnings[-1].startswith("support 1: ")
    assert "nowhere in the answer; dropped: 'Gamma'" in answer.warnings[-1]


# --------------------------------------------------------------------------------------------
# The real recordings still parse and map
# --------------------------------------------------------------------------------------------


def test_real_recordings_parse_and_place_every_findable_support(real_fixtures: Path) -> None:
    checked = 0
    for path in sorted(real_fixtures.rglob("*.json")):
        raw = json.loads(path.read_bytes())
        if "candidates" not in raw:
            continue
        response = decode_response(path.read_bytes())
        for n, cand in enumerate(response.candidates):
            answer = ground_answer(cand)
            supports = (raw["candidates"][n].get("groundingMetadata") or {}).get(
                "groundingSupports", []
            )
            kept = {c.support_index for c in answer.citations}
            for i, s in enumerate(supports):
                text = s.get("segment", {}).get("text")
                valid = any(
                    0 <= k < len(cand.grounding_metadata.grounding_chunks)  # type: ignore[union-attr]
                    for k in s.get("groundingChunkIndices", [])
                )
                if text and text in answer.text and valid:
                    assert i in kept, (path, i)
                    checked += 1
    assert checked >= 60


# --------------------------------------------------------------------------------------------
# ground cite shows the new fields
# --------------------------------------------------------------------------------------------


def test_cite_shows_file_search_maps_url_context_and_tool_parts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pipeline.commands.cite import cite_main

    assert cite_main(str(SHAPES / "file-search.json"), "json", None) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sources"][0]["file_search_store"] == "fileSearchStores/product-docs-k2j4h5"
    assert doc["sources"][1]["custom_metadata"] == [
        {"key": "tags", "stringListValue": {"values": ["service", "terms"]}}
    ]
    assert cite_main(str(SHAPES / "file-search.json"), "markdown", None) == 0
    err = capsys.readouterr().err
    assert "source [1] from fileSearchStores/product-docs-k2j4h5 (product=X200, year=2026)" in err

    assert cite_main(str(SHAPES / "maps-widget-token.json"), "markdown", None) == 0
    out, err = capsys.readouterr()
    assert "Maps widget context token: widgetcontent/AcBXPQhandbuiltTOKEN" in err
    assert "Café Sacher" in out

    assert cite_main(str(SHAPES / "url-context-one-byte-high.json"), "json", None) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["url_context"][1] == {
        "url": "https://api.example.org/missing",
        "status": "URL_RETRIEVAL_STATUS_ERROR",
    }
    assert cite_main(str(SHAPES / "gemini3-toolcall-first.json"), "json", None) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tool_parts"] == 2 and len(doc["citations"]) == 2
    assert {c["offsets_over"] for c in doc["citations"]} == {"answer"}
