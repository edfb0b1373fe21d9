"""The Interactions mapper: bodies validated by the pinned SDK's typed models first, then
mapped onto the generateContent value and placed by the unchanged citation mapping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.genai._gaos.types.interactions.interaction import Interaction as SdkInteraction

from pipeline.errors import ErrorClass
from pipeline.gemini.api_errors import TransientError, classify_http_error
from pipeline.gemini.interactions_map import (
    decode_any_response,
    decode_interaction,
    interaction_error_body,
    is_interaction,
)
from pipeline.gemini.wire import MalformedResponse, MalformedUsage
from pipeline.grounding.mapping import ground_answer

FIRST = "Zürich liegt am See. "
SECOND = "東京は日本の首都です。"


def _span(text: str, phrase: str) -> tuple[int, int]:
    """UTF-8 byte offsets of ``phrase`` in ``text`` (as the API sends them)."""
    data, needle = text.encode(), phrase.encode()
    start = data.index(needle)
    return start, start + len(needle)


def _cite(text: str, phrase: str, url: str, title: str) -> dict[str, Any]:
    start, end = _span(text, phrase)
    return {
        "type": "url_citation",
        "url": url,
        "title": title,
        "start_index": start,
        "end_index": end,
    }


def _body(**fields: Any) -> bytes:
    """A body the SDK's Interaction model accepts, as the SDK itself serialises it."""
    data = {"status": "completed", "id": "int-1", "model": "gemini-3-flash-preview", **fields}
    sdk = SdkInteraction.model_validate(data)
    for step in sdk.steps or []:
        assert not getattr(step, "is_unknown", False), step
    return json.dumps(sdk.model_dump(mode="json", by_alias=True, exclude_none=True)).encode()


def _search_steps() -> list[dict[str, Any]]:
    text2 = SECOND
    return [
        {"type": "thought", "signature": "c2ln", "summary": [{"type": "text", "text": "plan"}]},
        {
            "type": "google_search_call",
            "id": "s1",
            "arguments": {"queries": ["Zürich See", "Tokyo"]},
        },
        {
            "type": "google_search_result",
            "call_id": "s1",
            "result": [{"search_suggestions": "<div>chips</div>"}],
        },
        {
            "type": "model_output",
            "content": [
                {
                    "type": "text",
                    "text": FIRST,
                    "annotations": [
                        _cite(FIRST, "Zürich liegt am See.", "https://a.example/z", "a.example"),
                        _cite(FIRST, "Zürich liegt am See.", "https://b.example/z", "b.example"),
                    ],
                },
                {
                    "type": "text",
                    "text": text2,
                    "annotations": [_cite(text2, "日本の首都", "https://a.example/z", "a.example")],
                },
            ],
        },
    ]


USAGE = {
    "total_input_tokens": 12,
    "total_cached_tokens": 2,
    "total_output_tokens": 30,
    "total_tool_use_tokens": 40,
    "total_thought_tokens": 5,
    "total_tokens": 87,
    "grounding_tool_count": [{"type": "google_search", "count": 3}],
}


def test_search_answer_maps_to_the_generate_content_value_placed_exactly() -> None:
    response = decode_interaction(_body(steps=_search_steps(), usage=USAGE))
    candidate = response.candidates[0]
    assert candidate.finish_reason == "STOP"
    gm = candidate.grounding_metadata
    assert gm is not None
    assert gm.web_search_queries == ("Zürich See", "Tokyo")
    assert gm.grounding_tool_count == 3
    assert (
        gm.search_entry_point is not None
        and gm.search_entry_point.rendered_content == "<div>chips</div>"
    )
    answer = ground_answer(candidate)
    assert answer.text == FIRST + SECOND
    assert not answer.warnings
    assert [(c.text, c.chunk_indices) for c in answer.citations] == [
        ("Zürich liegt am See.", (0, 1)),
        ("日本の首都", (0,)),
    ]
    for c in answer.citations:
        assert answer.text[c.start : c.end] == c.text
    assert [(s.uri, s.title) for s in answer.sources] == [
        ("https://a.example/z", "a.example"),
        ("https://b.example/z", "b.example"),
    ]
    assert answer.tool_parts == 2
    usage = response.usage_metadata
    assert (usage.prompt_token_count, usage.candidates_token_count) == (12, 30)
    assert (usage.tool_use_prompt_token_count, usage.thoughts_token_count) == (40, 5)
    assert (usage.cached_content_token_count, usage.total_token_count) == (2, 87)
    assert response.model_version == "gemini-3-flash-preview" and response.response_id == "int-1"


def test_an_answer_with_no_search_and_no_citation_is_ungrounded() -> None:
    steps = [{"type": "model_output", "content": [{"type": "text", "text": "Hi."}]}]
    response = decode_interaction(_body(steps=steps))
    assert response.candidates[0].grounding_metadata is None
    assert not ground_answer(response.candidates[0]).grounded


def test_url_context_results_become_url_context_metadata() -> None:
    text = "Die Seite sagt ja."
    steps = [
        {"type": "url_context_call", "id": "u1", "arguments": {"urls": ["https://c.example/p"]}},
        {
            "type": "url_context_result",
            "call_id": "u1",
            "result": [{"url": "https://c.example/p", "status": "success"}],
        },
        {
            "type": "model_output",
            "content": [
                {
                    "type": "text",
                    "text": text,
                    "annotations": [_cite(text, "sagt ja", "https://c.example/p", "c")],
                }
            ],
        },
    ]
    candidate = decode_interaction(_body(steps=steps)).candidates[0]
    assert candidate.url_context_metadata is not None
    meta = candidate.url_context_metadata.url_metadata[0]
    assert (meta.retrieved_url, meta.url_retrieval_status) == (
        "https://c.example/p",
        "URL_RETRIEVAL_STATUS_SUCCESS",
    )
    answer = ground_answer(candidate)
    assert [c.text for c in answer.citations] == ["sagt ja"]


def test_offsets_off_character_boundaries_are_dropped_with_a_warning() -> None:
    text = "Zürich"
    bad = {
        "type": "url_citation",
        "url": "https://a.example",
        "title": "a",
        "start_index": 0,
        "end_index": 2,
    }
    steps = [
        {"type": "model_output", "content": [{"type": "text", "text": text, "annotations": [bad]}]}
    ]
    answer = ground_answer(decode_interaction(_body(steps=steps)).candidates[0])
    assert answer.citations == () and answer.warnings


def test_incomplete_status_is_max_tokens_and_unknown_steps_are_carried() -> None:
    steps = [
        {"type": "some_future_step", "id": "x"},
        {"type": "model_output", "content": [{"type": "text", "text": "cut"}]},
    ]
    body = json.dumps({"status": "incomplete", "steps": steps}).encode()
    candidate = decode_interaction(body).candidates[0]
    assert candidate.finish_reason == "MAX_TOKENS"
    assert ground_answer(candidate).text == "cut"


def test_malformed_bodies_name_their_place() -> None:
    with pytest.raises(MalformedUsage, match="usage"):
        decode_interaction(b'{"status": "completed", "usage": {"total_input_tokens": "many"}}')
    with pytest.raises(MalformedResponse, match="steps"):
        decode_interaction(b'{"status": "completed", "steps": [{"type": 3}]}')
    with pytest.raises(MalformedResponse):
        decode_interaction(b'{"status": "compl')


def test_either_api_decodes_from_its_stored_body() -> None:
    body = _body(steps=_search_steps(), usage=USAGE)
    assert is_interaction(body)
    assert ground_answer(decode_any_response(body).candidates[0]).text == FIRST + SECOND
    gc = b'{"candidates": [{"content": {"parts": [{"text": "x"}]}}]}'
    assert not is_interaction(gc)
    assert ground_answer(decode_any_response(gc).candidates[0]).text == "x"


def test_an_interactions_error_body_keeps_its_class_and_retry_delay() -> None:
    body = json.dumps(
        {
            "error": {
                "code": "RESOURCE_EXHAUSTED",
                "message": "quota",
                "details": [
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}
                ],
            }
        }
    ).encode()
    error = classify_http_error(429, interaction_error_body(body, 429))
    assert isinstance(error, TransientError)
    assert error.error_class == ErrorClass.RATE_LIMITED
    assert error.retry_delay == 7.0
    assert "RESOURCE_EXHAUSTED" in str(error)
    not_found = classify_http_error(
        404, interaction_error_body(b'{"error": {"code": "NOT_FOUND", "message": "no model"}}', 404)
    )
    assert not_found.error_class == "not_found"
    assert interaction_error_body(b"<html>", 502) == b"<html>"


RECORDED = "vercel-ai/interactions/google-search.json"  # a real Interactions response


def check_recorded(path: Path) -> None:
    """The real recording: each url_citation lands exactly on its byte slice, sources are the
    distinct (url, title) pairs, the queries and usage come through, the SDK parses it."""
    body = path.read_bytes()
    sdk = SdkInteraction.model_validate_json(body)
    assert sdk.steps and not any(getattr(s, "is_unknown", False) for s in sdk.steps)
    data = json.loads(body)
    output = next(s for s in data["steps"] if s["type"] == "model_output")
    text = output["content"][0]["text"]
    notes = output["content"][0]["annotations"]
    response = decode_interaction(body)
    answer = ground_answer(response.candidates[0])
    assert answer.grounded and not answer.warnings
    assert answer.text == text
    spans = sorted({(n["start_index"], n["end_index"]) for n in notes})
    assert len(answer.citations) == len(spans) == 18
    data_bytes = text.encode()
    for citation, (start, end) in zip(answer.citations, spans, strict=True):
        assert citation.text == data_bytes[start:end].decode()
        assert text[citation.start : citation.end] == citation.text
    pairs = list(dict.fromkeys((n["url"], n["title"]) for n in notes))
    assert [(s.uri, s.title) for s in answer.sources] == pairs
    assert answer.web_search_queries == (
        "notable AI developments May 8-15 2026",
        "AI news this week May 2026",
    )
    assert answer.search_entry_point_html and answer.search_entry_point_html.startswith("<style>")
    usage = response.usage_metadata
    assert (usage.prompt_token_count, usage.candidates_token_count) == (22, 973)
    assert (usage.tool_use_prompt_token_count, usage.thoughts_token_count) == (129, 249)
    assert usage.total_token_count == 1373
    assert response.candidates[0].finish_reason == "STOP"
    assert response.model_version == "gemini-2.5-flash"


def test_the_real_recording_maps_exactly(real_fixtures: Path) -> None:
    check_recorded(real_fixtures / RECORDED)
