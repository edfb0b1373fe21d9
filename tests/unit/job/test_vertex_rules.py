"""The Vertex rules of a job file: the data store path, the backend from the SDK's variables,
the Maps widget, and the [batch] Cloud Storage keys."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from pipeline.gemini.endpoint import ConfigurationError, backend_from_env, endpoint_for
from pipeline.job.calls import request_builder
from pipeline.job.datastore import location_warning, search_location
from pipeline.job.spec import JobSpec, JobSpecError, load_jobspec

DATASTORE = "projects/p1/locations/global/collections/default_collection/dataStores/kb1"
ENGINE = "projects/p1/locations/global/collections/default_collection/engines/app1"


def _job(tmp_path: Path, *lines: str, env: dict[str, str] | None = None) -> JobSpec:
    (tmp_path / "questions.jsonl").write_text('{"id": "1", "question": "q"}\n')
    (tmp_path / "job.toml").write_text(
        '[job]\nname = "t"\n\n[source]\nfile = "questions.jsonl"\n', encoding="utf-8"
    )
    return load_jobspec(tmp_path / "job.toml", list(lines), env=env or {})


VERTEX = 'model.backend="vertex"'


def test_full_data_store_and_engine_paths_load(tmp_path: Path) -> None:
    spec = _job(
        tmp_path, VERTEX, 'grounding.tool="vertex_ai_search"', f'grounding.datastore="{DATASTORE}"'
    )
    assert spec.warnings == ()
    spec = _job(
        tmp_path, VERTEX, 'grounding.tool="vertex_ai_search"', f'grounding.engine="{ENGINE}"'
    )
    assert spec.warnings == ()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("datastore", "kb1", "is a bare id; expected projects/PROJECT/locations/global"),
        ("datastore", "projects/p1/dataStores/kb1", "not a full resource path"),
        ("datastore", ENGINE, "dataStores/DATA_STORE_ID"),
        ("engine", DATASTORE, "engines/ENGINE_ID"),
    ],
)
def test_a_bare_or_wrong_path_is_refused_with_the_expected_shape(
    tmp_path: Path, key: str, value: str, message: str
) -> None:
    with pytest.raises(JobSpecError, match=rf"job\.toml: grounding\.{key}: .*{message}"):
        _job(tmp_path, VERTEX, 'grounding.tool="vertex_ai_search"', f'grounding.{key}="{value}"')


def test_a_data_store_outside_global_loads_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    regional = DATASTORE.replace("/global/", "/europe-west4/")
    with caplog.at_level(logging.WARNING, logger="pipeline.job.spec"):
        spec = _job(
            tmp_path,
            VERTEX,
            'grounding.tool="vertex_ai_search"',
            f'grounding.datastore="{regional}"',
        )
    [warning] = spec.warnings
    assert "locations/europe-west4" in warning and "not a Vertex AI Search location" in warning
    assert any(
        r.action == "job_warning" and "europe-west4" in r.getMessage() for r in caplog.records
    )
    assert search_location(DATASTORE.replace("/global/", "/eu/"), "datastore") == "eu"
    assert "commonly live under locations/global" in (location_warning("eu", "datastore") or "")
    assert location_warning("global", "datastore") is None


@pytest.mark.parametrize(
    ("env", "backend"),
    [
        ({}, None),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "true"}, "vertex"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "True"}, "vertex"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "1"}, "vertex"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "yes"}, "developer"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "false"}, "developer"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "0", "GOOGLE_GENAI_USE_ENTERPRISE": "true"}, "vertex"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "1", "GOOGLE_GENAI_USE_ENTERPRISE": "false"}, "developer"),
        ({"GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "us-central1"}, None),
    ],
)
def test_the_backend_switch_reads_as_the_sdk_does(env: dict[str, str], backend: str | None) -> None:
    assert backend_from_env(env) == backend


def test_the_environment_chooses_the_backend_only_when_the_file_does_not(tmp_path: Path) -> None:
    env = {"GOOGLE_GENAI_USE_VERTEXAI": "true"}
    assert _job(tmp_path, env=env).model.backend == "vertex"
    assert _job(tmp_path).model.backend == "developer"
    assert _job(tmp_path, 'model.backend="developer"', env=env).model.backend == "developer"
    off = {"GOOGLE_GENAI_USE_VERTEXAI": "false"}
    assert _job(tmp_path, VERTEX, env=off).model.backend == "vertex"
    # A Vertex-only tool follows the environment's choice, as the file's would be checked.
    with pytest.raises(JobSpecError, match=r'needs model\.backend = "vertex"'):
        _job(tmp_path, 'grounding.tool="enterprise_web_search"', env=off)
    assert _job(tmp_path, 'grounding.tool="enterprise_web_search"', env=env).model.backend == (
        "vertex"
    )


def test_vertex_project_and_location_come_from_the_sdk_variables(tmp_path: Path) -> None:
    class NoAuth:
        async def headers(self) -> dict[str, str]:
            return {}

    env = {"GOOGLE_CLOUD_PROJECT": "p9"}
    url = endpoint_for("vertex", "gemini-2.5-flash", env=env, auth=NoAuth()).url
    assert url.startswith("https://aiplatform.googleapis.com/v1/projects/p9/locations/global/")
    env["GOOGLE_CLOUD_LOCATION"] = "europe-west4"
    url = endpoint_for("vertex", "gemini-2.5-flash", env=env, auth=NoAuth()).url
    assert url.startswith("https://europe-west4-aiplatform.googleapis.com/v1/projects/p9/")
    with pytest.raises(ConfigurationError, match="GOOGLE_CLOUD_PROJECT"):
        endpoint_for("vertex", "gemini-2.5-flash", env={}, auth=NoAuth())


def test_maps_widget_sends_enable_widget(tmp_path: Path) -> None:
    spec = _job(tmp_path, 'grounding.tool="google_maps"', "grounding.maps_widget=true")
    body = orjson.loads(request_builder(spec).body("Cafés near the Prater"))
    assert body["tools"] == [{"googleMaps": {"enableWidget": True}}]
    plain = _job(tmp_path, 'grounding.tool="google_maps"')
    assert orjson.loads(request_builder(plain).body("x"))["tools"] == [{"googleMaps": {}}]
    # Without the google_maps tool, the widget key is ignored (a note), never sent.
    searching = _job(tmp_path, "grounding.maps_widget=true")
    assert searching.grounding.maps_widget is False
    assert searching.warnings == (
        "grounding.maps_widget: ignored: only used with the google_maps tool",
    )


def test_batch_cloud_storage_keys(tmp_path: Path) -> None:
    developer = _job(tmp_path, 'batch.gcs_input="gs://b/in"')  # no Vertex: ignored, noted
    assert developer.batch.gcs_input == ""
    (note,) = developer.warnings
    assert note.startswith("batch.gcs_input: ignored: only used with Vertex batch prediction")
    spec = _job(
        tmp_path,
        VERTEX,
        'batch.gcs_input="gs://my-bucket/ground/in"',
        'batch.gcs_output="gs://my-bucket/ground/out"',
        'batch.gcs_endpoint="http://127.0.0.1:9023"',
    )
    assert spec.batch.gcs_input == "gs://my-bucket/ground/in"
    with pytest.raises(JobSpecError, match=r"batch\.gcs_output: .*not a Cloud Storage URI"):
        _job(tmp_path, VERTEX, 'batch.gcs_output="/tmp/out"')
    with pytest.raises(JobSpecError, match=r"batch\.gcs_endpoint: must start with http"):
        _job(tmp_path, VERTEX, 'batch.gcs_endpoint="localhost:9023"')
