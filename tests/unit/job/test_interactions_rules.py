"""``[model] api = "interactions"``: refused at load where Google does not offer it (batch
mode, Vertex) or this pipeline has no mapping (other tools); the CLI says so in one line, exit 2.
And the request it sends: the same as generateContent's, in the Interactions shape."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline import cli
from pipeline.gemini.endpoint import endpoint_for
from pipeline.gemini.interactions_request import interactions_body
from pipeline.job.calls import request_builder
from pipeline.job.spec import JobSpec, JobSpecError, load_jobspec

API = 'model.api="interactions"'


def _write(tmp_path: Path) -> Path:
    (tmp_path / "questions.jsonl").write_text('{"id": "1", "question": "q"}\n')
    job = tmp_path / "job.toml"
    job.write_text('[job]\nname = "t"\n\n[source]\nfile = "questions.jsonl"\n', encoding="utf-8")
    return job


def _job(tmp_path: Path, *lines: str) -> JobSpec:
    return load_jobspec(_write(tmp_path), list(lines), env={})


def test_the_default_is_generate_content_and_interactions_loads_online(tmp_path: Path) -> None:
    assert _job(tmp_path).model.api == "generate_content"
    spec = _job(tmp_path, API, 'grounding.tool=["google_search", "url_context"]')
    assert spec.model.api == "interactions"


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (['model.mode="batch"'], "not offered in batch mode"),
        (['model.backend="vertex"', 'model.project="p"'], "Developer API only"),
        (['grounding.tool="google_maps"'], "not google_maps"),
    ],
)
def test_where_it_is_not_offered_it_is_refused_at_load(
    tmp_path: Path, lines: list[str], said: str
) -> None:
    with pytest.raises(JobSpecError, match=r"model\.api") as info:
        _job(tmp_path, API, *lines)
    assert said in str(info.value)


def test_batch_mode_with_interactions_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _write(tmp_path)
    assert cli.main(["run", str(job), "--set", API, "--set", 'model.mode="batch"']) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "model.api" in err and "batch" in err
    assert not (tmp_path / "t.sqlite").exists()


def test_the_endpoint_is_the_interactions_path_with_the_model_beside_it() -> None:
    env = {"GEMINI_API_KEY": "k"}
    e = endpoint_for(
        "developer", "gemini-3-flash-preview", base_url="http://h:1/", env=env, api="interactions"
    )
    assert (e.url, e.api, e.model) == (
        "http://h:1/v1beta/interactions",
        "interactions",
        "gemini-3-flash-preview",
    )
    assert endpoint_for("developer", "m", env=env).url.endswith("/v1beta/models/m:generateContent")


def test_the_request_asks_the_same_in_the_interactions_shape(tmp_path: Path) -> None:
    spec = _job(
        tmp_path,
        API,
        'grounding.tool=["google_search", "url_context"]',
        'model.system_instruction="Be brief."',
        "model.temperature=0.5",
    )
    gc = request_builder(spec).body("Wer baute den Kölner Dom?", urls=["https://a.example/x"])
    sent = orjson.loads(interactions_body(gc, "gemini-3-flash-preview"))
    assert sent["model"] == "gemini-3-flash-preview"
    assert sent["store"] is False and "previous_interaction_id" not in sent
    assert sent["input"] == [
        {"type": "text", "text": "Wer baute den Kölner Dom?\n\nhttps://a.example/x"}
    ]
    assert sent["tools"] == [{"type": "google_search"}, {"type": "url_context"}]
    assert sent["system_instruction"] == "Be brief."
    assert sent["generation_config"]["temperature"] == 0.5
    assert "max_output_tokens" in sent["generation_config"]
    assert "response_format" not in sent


def test_call_2_sends_the_users_schema_as_response_format() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    gc = orjson.dumps(
        {
            "contents": [{"role": "user", "parts": [{"text": "x"}]}],
            "generationConfig": {
                "responseMimeType": "application/json",
                "responseJsonSchema": schema,
            },
        }
    )
    sent = orjson.loads(interactions_body(gc, "m"))
    assert sent["response_format"] == {
        "type": "text",
        "mime_type": "application/json",
        "schema": schema,
    }
    assert "tools" not in sent


def test_a_tool_with_no_interactions_form_is_refused() -> None:
    gc = orjson.dumps({"contents": [{"parts": [{"text": "x"}]}], "tools": [{"googleMaps": {}}]})
    with pytest.raises(ValueError, match="googleMaps"):
        interactions_body(gc, "m")
