"""Google's own SDK drives the emulator's Interactions API (``client.interactions.create``).

Every answer must parse into the SDK's typed models with no unknown step or annotation, and
every ``url_citation``'s byte offsets must lie inside its text and on character boundaries;
the errors must be the SDK's typed client errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import types
from google.genai._gaos.errors.createinteraction import CreateInteractionClientError
from google.genai._interactions_errors import (
    APIStatusError,
    BadRequestError,
    NotFoundError,
    RateLimitError,
)

from pipeline.emulator.config import EmulatorConfig, ModelQuota
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.gemini.interactions_map import decode_interaction
from pipeline.grounding.mapping import ground_answer

MODEL = "gemini-3.8-flash"


@pytest.fixture(scope="module")
def emu() -> Iterator[RunningEmulator]:
    with running_emulator(EmulatorConfig(seed=4, ungrounded_share=0.0)) as e:
        yield e


def client_for(emu: RunningEmulator) -> genai.Client:
    options = types.HttpOptions(
        base_url=emu.base_url, retry_options=types.HttpRetryOptions(attempts=1)
    )
    return genai.Client(api_key=emu.api_key, http_options=options)


def typed_error(error: APIStatusError) -> CreateInteractionClientError:
    """The SDK's typed parse of the error body (what its compat error was made from)."""
    cause = error.__cause__
    assert isinstance(cause, CreateInteractionClientError), repr(cause)
    return cause


def check_parsed(interaction: Any) -> str:
    """No unknown step, content or annotation; offsets inside their text; the text."""
    assert interaction.status == "completed"
    texts: list[str] = []
    for step in interaction.steps or []:
        assert not getattr(step, "is_unknown", False), step
        if step.type != "model_output":
            continue
        for content in step.content or []:
            assert not getattr(content, "is_unknown", False), content
            assert content.type == "text"
            data = content.text.encode()
            for note in content.annotations or []:
                assert note.type == "url_citation", note
                assert 0 <= note.start_index < note.end_index <= len(data)
                data[note.start_index : note.end_index].decode()  # on character boundaries
                assert note.url and note.title
            texts.append(content.text)
    return "".join(texts)


def test_search_answers_parse_and_cite_inside_their_text(emu: RunningEmulator) -> None:
    client = client_for(emu)
    before = emu.stats()["requests"]["by_kind"]
    r = client.interactions.create(
        model=MODEL, input="Who was Marie Curie?", tools=[{"type": "google_search"}], store=False
    )
    text = check_parsed(r)
    assert "Skłodowska" in text
    kinds = [s.type for s in r.steps]
    # the real recording's order: the answer, then the search that grounded it
    assert kinds[-3:] == ["model_output", "google_search_call", "google_search_result"]
    assert r.steps[-2].arguments.queries
    assert r.usage.total_input_tokens and r.usage.total_output_tokens
    assert r.usage.grounding_tool_count[0].type == "google_search"
    notes = [
        a
        for s in r.steps
        if s.type == "model_output"
        for c in s.content
        for a in c.annotations or []
    ]
    assert notes
    after = emu.stats()["requests"]["by_kind"]
    assert after.get("interactions", 0) == before.get("interactions", 0) + 1
    assert after.get("developer", 0) == before.get("developer", 0)


def test_the_raw_body_maps_to_citations_placed_exactly(emu: RunningEmulator) -> None:
    client = client_for(emu)
    raw = client.interactions.with_raw_response.create(
        model=MODEL, input="Who was Marie Curie?", tools=[{"type": "google_search"}]
    )
    body = raw.http_response.content if hasattr(raw, "http_response") else raw.content
    answer = ground_answer(decode_interaction(body).candidates[0])
    assert answer.grounded and answer.citations and answer.sources
    assert not answer.warnings
    for c in answer.citations:
        assert answer.text[c.start : c.end] == c.text


def test_url_context(emu: RunningEmulator) -> None:
    client = client_for(emu)
    r = client.interactions.create(
        model=MODEL,
        input="Summarise https://en.wikipedia.org/wiki/Marie_Curie please.",
        tools=[{"type": "url_context"}],
    )
    check_parsed(r)
    kinds = [s.type for s in r.steps]
    assert "url_context_call" in kinds and "url_context_result" in kinds
    result = next(s for s in r.steps if s.type == "url_context_result")
    assert result.result[0].url and result.result[0].status in (
        "success",
        "error",
        "paywall",
        "unsafe",
    )


def test_response_format(emu: RunningEmulator) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["name", "year"],
    }
    client = client_for(emu)
    r = client.interactions.create(
        model=MODEL,
        input="Marie Curie won in 1903.",
        response_format={"type": "text", "mime_type": "application/json", "schema": schema},
    )
    data = json.loads(check_parsed(r))
    assert isinstance(data["name"], str) and isinstance(data["year"], int)


def test_an_invalid_request_is_a_typed_client_error(emu: RunningEmulator) -> None:
    client = client_for(emu)
    with pytest.raises(BadRequestError) as info:
        client.interactions.create(model=MODEL, input="x", tools=[{"type": "retrieval"}])
    typed = typed_error(info.value)
    assert typed.raw_response.status_code == 400
    assert typed.data.error.code == "INVALID_ARGUMENT"


def test_an_unknown_model_is_a_404_with_googles_body(emu: RunningEmulator) -> None:
    client = client_for(emu)
    with pytest.raises(NotFoundError) as info:
        client.interactions.create(model="no-such-model", input="x")
    typed = typed_error(info.value)
    assert typed.raw_response.status_code == 404
    assert typed.data.error.code == "NOT_FOUND"
    assert "no-such-model" in (typed.data.error.message or "")


def test_a_429_carries_its_retry_delay() -> None:
    with running_emulator(EmulatorConfig(quotas={"*": ModelQuota(rpm=1)})) as e:
        client = client_for(e)
        client.interactions.create(model=MODEL, input="x")
        with pytest.raises(RateLimitError) as info:
            client.interactions.create(model=MODEL, input="x")
        stats = e.stats()
    typed = typed_error(info.value)
    assert typed.raw_response.status_code == 429
    assert typed.data.error.code == "RESOURCE_EXHAUSTED"
    body = json.loads(typed.body or "")
    assert any(d.get("retryDelay") for d in body["error"]["details"])
    assert stats["requests"]["by_kind"]["interactions"] == 2
    assert stats["quota_rejections"]["total"] == 1
