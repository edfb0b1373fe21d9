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

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from tests.support.credentials import service_account_info

genai = pytest.importorskip("google.genai")  # a dev dependency; skips only if not installed
from google.genai import errors, types  # noqa: E402

# A Google from before the shutdowns: these tests exercise each generation, 1.5 to 3.
LEGACY: frozenset[str] = frozenset()

SEARCH = types.GenerateContentConfig(tools=[types.Tool(google_search=types.GoogleSearch())])


@pytest.fixture(scope="module")
def emu() -> Iterator[RunningEmulator]:
    with running_emulator(EmulatorConfig(shutdowns=LEGACY, seed=4, ungrounded_share=0.0)) as e:
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
    from pipeline.emulator.config import ModelQuota

    cfg = EmulatorConfig(shutdowns=LEGACY, quotas={"*": ModelQuota(rpm=1)})
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
    # Vertex web chunks carry domain (the Developer API's do not).
    webs = [ch.web for ch in r.candidates[0].grounding_metadata.grounding_chunks if ch.web]
    assert webs and all(w.domain and w.domain == w.title for w in webs)
    assert r.usage_metadata.traffic_type == types.TrafficType.ON_DEMAND
    after = emu.stats()
    assert after["tokens_issued"] == before["tokens_issued"] + 1
    assert (
        after["requests"]["by_kind"]["vertex"] == before["requests"]["by_kind"].get("vertex", 0) + 1
    )


# --- Google's SDK parses every shape ---------------------------------------------------------


def test_sdk_parses_every_new_shape(emu: RunningEmulator) -> None:
    """Gemini 3 tool parts, code execution, File Search, URL context, the Maps widget token
    and legacy dynamic retrieval: the SDK's types come back populated."""
    c = developer_client(emu)  # keep a reference: a collected Client closes its transport
    r = c.models.generate_content(
        model="gemini-3-flash-preview",
        contents="Who built the Eiffel Tower?",
        config=types.GenerateContentConfig(tools=[types.Tool(google_search=types.GoogleSearch())]),
    )
    parts = r.candidates[0].content.parts
    assert parts[0].tool_call is not None and parts[0].thought_signature
    assert parts[1].tool_response is not None
    assert r.candidates[0].grounding_metadata.grounding_supports

    r = c.models.generate_content(
        model="gemini-2.5-flash",
        contents="What is 10 factorial?",
        config=types.GenerateContentConfig(
            tools=[
                types.Tool(code_execution=types.ToolCodeExecution()),
                types.Tool(google_search=types.GoogleSearch()),
            ]
        ),
    )
    assert r.candidates[0].content.parts[0].executable_code is not None

    r = c.models.generate_content(
        model="gemini-2.5-flash",
        contents="What does the warranty cover?",
        config=types.GenerateContentConfig(
            tools=[
                types.Tool(
                    file_search=types.FileSearch(file_search_store_names=["fileSearchStores/kb"])
                )
            ]
        ),
    )
    chunks = r.candidates[0].grounding_metadata.grounding_chunks
    docs = [ch.retrieved_context for ch in chunks if ch.retrieved_context is not None]
    assert docs and all(d.file_search_store == "fileSearchStores/kb" for d in docs)
    assert all(d.custom_metadata and d.text and d.uri is None for d in docs)

    r = c.models.generate_content(
        model="gemini-2.5-flash",
        contents="Read https://docs.example.org/x",
        config=types.GenerateContentConfig(tools=[types.Tool(url_context=types.UrlContext())]),
    )
    meta = r.candidates[0].url_context_metadata
    assert meta.url_metadata[0].retrieved_url == "https://docs.example.org/x"

    r = c.models.generate_content(
        model="gemini-2.5-flash",
        contents="coffee",
        config=types.GenerateContentConfig(
            tools=[types.Tool(google_maps=types.GoogleMaps(enable_widget=True))]
        ),
    )
    assert r.candidates[0].grounding_metadata.google_maps_widget_context_token

    r = c.models.generate_content(
        model="gemini-3-flash-preview",
        contents="coffee near the station",
        config=types.GenerateContentConfig(tools=[types.Tool(google_maps=types.GoogleMaps())]),
    )
    parts = [p for p in r.candidates[0].content.parts if not p.thought]
    assert parts[0].tool_call.tool_type == types.ToolType.GOOGLE_MAPS
    assert parts[1].tool_response is not None and parts[1].thought_signature
    assert any(ch.maps for ch in r.candidates[0].grounding_metadata.grounding_chunks)

    r = c.models.generate_content(
        model="gemini-1.5-flash",
        contents="Who won the 2024 Olympics?",
        config=types.GenerateContentConfig(
            tools=[
                types.Tool(
                    google_search_retrieval=types.GoogleSearchRetrieval(
                        dynamic_retrieval_config=types.DynamicRetrievalConfig(
                            mode=types.DynamicRetrievalConfigMode.MODE_DYNAMIC,
                            dynamic_threshold=0.0,
                        )
                    )
                )
            ]
        ),
    )
    score = r.candidates[
        0
    ].grounding_metadata.retrieval_metadata.google_search_dynamic_retrieval_score
    assert score is not None


def test_the_sdk_runs_a_file_batch_on_the_emulator(tmp_path: Path) -> None:
    """google-genai's files.upload (resumable), batches.create/get/list/cancel and
    files.download speak to the emulator's Batch API."""
    with running_emulator(EmulatorConfig(shutdowns=LEGACY, seed=4, batch_delay_s=0.0)) as emu:
        client = developer_client(emu)
        path = tmp_path / "requests.jsonl"
        lines = [
            {
                "key": f"q{i}",
                "request": {
                    "contents": [{"role": "user", "parts": [{"text": f"Eiffel tower #{i}"}]}],
                    "tools": [{"google_search": {}}],
                },
            }
            for i in range(3)
        ]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        uploaded = client.files.upload(
            file=path, config=types.UploadFileConfig(mime_type="application/jsonl")
        )
        assert uploaded.name and uploaded.name.startswith("files/")
        job = client.batches.create(
            model="gemini-2.5-flash", src=uploaded.name, config={"display_name": "sdk"}
        )
        assert job.name and job.name.startswith("batches/")
        done = client.batches.get(name=job.name)
        assert done.state == types.JobState.JOB_STATE_SUCCEEDED
        assert done.dest is not None and done.dest.file_name
        assert any(b.name == job.name for b in client.batches.list())
        content = client.files.download(file=done.dest.file_name)
        rows = [json.loads(line) for line in content.decode().splitlines()]
        assert sorted(r["key"] for r in rows) == ["q0", "q1", "q2"]
        assert all(r["response"]["candidates"] for r in rows)
        client.batches.cancel(name=job.name)  # already finished: a no-op, as at Google
        assert emu.stats()["batch"]["batches_created"] == 1
