"""The emulator sends every real response shape when the model or the request calls for it.

Each body is decoded by our wire structs and mapped (every support placed exactly on its
text); ``tests/e2e/test_emulator_sdk.py`` has Google's SDK parse the same shapes.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.gemini.wire import decode_response
from pipeline.grounding.mapping import GroundedAnswer, ground_answer

# A Google from before the shutdowns: these tests exercise each generation, 1.5 to 3.
LEGACY: frozenset[str] = frozenset()

SEARCH = {"googleSearch": {}}
QUESTIONS = [f"Who designed landmark number {i}?" for i in range(12)]


@pytest.fixture(scope="module")
def emu() -> Iterator[RunningEmulator]:
    with running_emulator(EmulatorConfig(shutdowns=LEGACY, seed=13, ungrounded_share=0.0)) as e:
        yield e


def post(emu: RunningEmulator, model: str, prompt: str, tools: list[dict[str, Any]]) -> bytes:
    body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}], "tools": tools}
    req = urllib.request.Request(
        f"{emu.base_url}/v1beta/models/{model}:generateContent",
        data=json.dumps(body).encode(),
        headers={"x-goog-api-key": emu.api_key, "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as response:
        return response.read()


def mapped(raw: bytes) -> tuple[GroundedAnswer, dict[str, Any]]:
    """The mapped answer; asserts every support is placed exactly on its segment text."""
    cand = decode_response(raw).candidates[0]
    answer = ground_answer(cand)
    wire = json.loads(raw)["candidates"][0]
    supports = wire["groundingMetadata"]["groundingSupports"]
    assert len(answer.citations) == len(supports)
    for c in answer.citations:
        assert c.text == supports[c.support_index]["segment"]["text"]
        assert answer.text[c.start : c.end] == c.text
    return answer, wire


def test_gemini_3_tool_call_parts_first_and_no_part_index(emu: RunningEmulator) -> None:
    for q in QUESTIONS:
        answer, wire = mapped(post(emu, "gemini-3-flash-preview", q, [SEARCH]))
        parts = wire["content"]["parts"]
        kinds = [
            next(k for k in p if k != "thoughtSignature") for p in parts if not p.get("thought")
        ]
        assert kinds[:2] == ["toolCall", "toolResponse"] and kinds[2] == "text"
        assert all(
            p.get("thoughtSignature") for p in parts if "toolCall" in p or "toolResponse" in p
        )
        assert all(
            "partIndex" not in s["segment"] for s in wire["groundingMetadata"]["groundingSupports"]
        )
        assert answer.tool_parts == 2 and answer.warnings == ()
    # 2.5 answers stay as they were: no tool parts.
    _, wire = mapped(post(emu, "gemini-2.5-flash", QUESTIONS[0], [SEARCH]))
    assert all("text" in p for p in wire["content"]["parts"])


def test_gemini_3_maps_tool_call_parts_first(emu: RunningEmulator) -> None:
    for q in QUESTIONS[:4]:
        answer, wire = mapped(post(emu, "gemini-3-flash-preview", q, [{"googleMaps": {}}]))
        parts = wire["content"]["parts"]
        assert parts[0]["toolCall"]["toolType"] == "GOOGLE_MAPS" and parts[0]["thoughtSignature"]
        assert parts[1]["toolResponse"]["toolType"] == "GOOGLE_MAPS"
        assert answer.tool_parts == 2 and answer.warnings == ()
        assert all(s.kind == "maps" for s in answer.sources if s.kind != "other")
    # Maps on 2.5: no tool parts.
    _, wire = mapped(post(emu, "gemini-2.5-flash", QUESTIONS[0], [{"googleMaps": {}}]))
    assert all("text" in p for p in wire["content"]["parts"])


def test_code_execution_parts_first(emu: RunningEmulator) -> None:
    answer, wire = mapped(
        post(emu, "gemini-2.5-flash", QUESTIONS[1], [{"codeExecution": {}}, SEARCH])
    )
    parts = wire["content"]["parts"]
    assert "executableCode" in parts[0] and "codeExecutionResult" in parts[1]
    assert answer.tool_parts == 2


def test_file_search(emu: RunningEmulator) -> None:
    tools = [{"fileSearch": {"fileSearchStoreNames": ["fileSearchStores/kb-1"]}}]
    answer, _ = mapped(post(emu, "gemini-2.5-flash", QUESTIONS[2], tools))
    docs = [s for s in answer.sources if s.kind == "retrievedContext"]
    assert docs and all(
        s.file_search_store == "fileSearchStores/kb-1" and s.uri is None for s in docs
    )
    assert all(s.text and s.custom_metadata for s in docs)


def test_url_context_statuses_and_one_byte_quirk(emu: RunningEmulator) -> None:
    prompt = "Summarise https://docs.example.org/a and https://docs.example.org/missing please"
    answer, _ = mapped(post(emu, "gemini-2.5-flash", prompt, [{"urlContext": {}}]))
    assert answer.url_statuses == (
        ("https://docs.example.org/a", "URL_RETRIEVAL_STATUS_SUCCESS"),
        ("https://docs.example.org/missing", "URL_RETRIEVAL_STATUS_ERROR"),
    )
    assert answer.warnings and all("shift -1" in w for w in answer.warnings)
    assert all(s.uri and s.uri.startswith("https://docs.example.org/") for s in answer.sources)


def test_maps_widget_token(emu: RunningEmulator) -> None:
    answer, _ = mapped(
        post(emu, "gemini-2.5-flash", "ramen near me", [{"googleMaps": {"enableWidget": True}}])
    )
    assert answer.maps_widget_token and answer.maps_widget_token.startswith("widgetcontent/")
    assert all(s.place_id for s in answer.sources if s.kind == "maps")
    plain, wire = mapped(post(emu, "gemini-2.5-flash", "ramen near me", [{"googleMaps": {}}]))
    assert plain.maps_widget_token is None
    assert "googleMapsWidgetContextToken" not in wire["groundingMetadata"]


def test_legacy_dynamic_retrieval_score(emu: RunningEmulator) -> None:
    tool = {
        "googleSearchRetrieval": {
            "dynamicRetrievalConfig": {"mode": "MODE_DYNAMIC", "dynamicThreshold": 0.0}
        }
    }
    answer, _ = mapped(post(emu, "gemini-1.5-flash", QUESTIONS[3], [tool]))
    assert answer.dynamic_retrieval_score is not None
    assert all(c.confidence_scores is not None for c in answer.citations)
