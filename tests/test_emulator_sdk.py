"""Google's own SDK (google-genai) against the emulator: its types come back populated.

If the SDK parses our bodies into its pydantic types with every grounding field set, the
emulator's wire format is the one the SDK was written against. Vertex goes through a real
google-auth service-account flow whose ``token_uri`` is the emulator's ``/token``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.emulator import EmulatorConfig, running_emulator
from pipeline.emulator.testing import RunningEmulator
from tests.credentials import service_account_info

genai = pytest.importorskip("google.genai")  # a dev dependency; skips only if not installed
from google.genai import errors, types  # noqa: E402

SEARCH = types.GenerateContentConfig(tools=[types.Tool(google_search=types.GoogleSearch())])


@pytest.fixture(scope="module")
def emu() -> Iterator[RunningEmulator]:
    with running_emulator(EmulatorConfig(seed=4, ungrounded_share=0.0)) as e:
        yield e


def developer_client(emu: RunningEmulator) -> genai.Client:
    return genai.Client(api_key=emu.api_key, http_options=types.HttpOptions(base_url=emu.base_url))


def check_grounded(r: types.GenerateContentResponse) -> None:
    cand = r.candidates[0]
    gm = cand.grounding_metadata
    assert gm is not None and gm.grounding_chunks and gm.grounding_supports
    assert gm.web_search_queries
    assert gm.search_entry_point and gm.search_entry_point.rendered_content
    for chunk in gm.grounding_chunks:
        assert chunk.web and chunk.web.uri and chunk.web.title
    text = "".join(p.text for p in cand.content.parts if p.text and not p.thought)
    for sup in gm.grounding_supports:
        seg = sup.segment
        start = seg.start_index or 0
        raw = cand.content.parts[seg.part_index or 0].text.encode()
        assert raw[start : seg.end_index].decode() == seg.text
        assert seg.text in text
    u = r.usage_metadata
    assert u.prompt_token_count and u.candidates_token_count and u.total_token_count
    assert cand.finish_reason == types.FinishReason.STOP
    assert r.model_version and r.response_id


def test_developer_api_grounded(emu: RunningEmulator) -> None:
    client = developer_client(emu)  # keep a reference: a collected Client closes its transport
    r = client.models.generate_content(
        model="gemini-2.5-flash", contents="Who was Marie Curie?", config=SEARCH
    )
    check_grounded(r)
    assert r.usage_metadata.tool_use_prompt_token_count
    assert r.candidates[0].grounding_metadata.grounding_supports[0].confidence_scores is None
    assert "Skłodowska" in r.text


def test_developer_api_structured_output(emu: RunningEmulator) -> None:
    schema = {
        "type": "OBJECT",
        "properties": {"name": {"type": "STRING"}, "year": {"type": "INTEGER"}},
        "required": ["name", "year"],
    }
    client = developer_client(emu)  # keep a reference: a collected Client closes its transport
    r = client.models.generate_content(
        model="gemini-2.5-flash",
        contents="Marie Curie won in 1903.",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=schema
        ),
    )
    value = json.loads(r.text)
    assert value["year"] == 1903 and isinstance(value["name"], str)


def test_schema_with_search_is_a_client_error_on_2x(emu: RunningEmulator) -> None:
    config = types.GenerateContentConfig(
        tools=[types.Tool(google_search=types.GoogleSearch())],
        response_mime_type="application/json",
        response_schema={"type": "OBJECT", "properties": {"a": {"type": "STRING"}}},
    )
    client = developer_client(emu)
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(model="gemini-2.5-flash", contents="x", config=config)
    assert info.value.code == 400
    assert info.value.status == "INVALID_ARGUMENT"
    assert "controlled generation is not supported" in info.value.message


def test_sdk_sees_quota_error_with_retry_info() -> None:
    from pipeline.emulator import ModelQuota

    cfg = EmulatorConfig(quotas={"*": ModelQuota(rpm=1)})
    with running_emulator(cfg) as e:
        client = developer_client(e)
        client.models.generate_content(model="gemini-2.5-flash", contents="x")
        with pytest.raises(errors.ClientError) as info:
            client.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert info.value.code == 429
    details = info.value.details["error"]["details"]
    assert any(d.get("retryDelay") for d in details)


def test_vertex_with_service_account(emu: RunningEmulator, tmp_path: Path) -> None:
    from google.oauth2 import service_account

    info = service_account_info(f"{emu.base_url}/token")
    creds = service_account.Credentials.from_service_account_info(
        info, scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    client = genai.Client(
        vertexai=True,
        project="proj-1",
        location="us-central1",
        credentials=creds,
        http_options=types.HttpOptions(base_url=emu.base_url),
    )
    before = emu.stats()
    r = client.models.generate_content(
        model="gemini-2.0-flash", contents="Tell me about the Taj Mahal", config=SEARCH
    )
    check_grounded(r)
    assert r.candidates[0].grounding_metadata.grounding_supports[0].confidence_scores
    assert r.usage_metadata.traffic_type == types.TrafficType.ON_DEMAND
    after = emu.stats()
    assert after["tokens_issued"] == before["tokens_issued"] + 1
    assert (
        after["requests"]["by_kind"]["vertex"] == before["requests"]["by_kind"].get("vertex", 0) + 1
    )
