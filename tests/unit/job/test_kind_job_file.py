"""The job file is kind to a new user: a key of a switched-off feature is ignored with one
note (never an error), an unknown key or section names the closest one, and a bad choice lists
the valid ones; every refusal stays one line naming the file and the key."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from pipeline.job.calls import grounded_call, request_builder
from pipeline.job.spec import JobSpec, JobSpecError, load_jobspec
from tests.support.paths import JOBS

JOB = '[job]\nname = "t"\n\n[source]\nfile = "questions.jsonl"\nmetadata_fields = ["url"]\n'


def _path(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "questions.jsonl").write_text('{"id": "1", "question": "q"}\n')
    path = tmp_path / "job.toml"
    path.write_text(JOB + extra, encoding="utf-8")
    return path


def _job(tmp_path: Path, *overrides: str, extra: str = "") -> JobSpec:
    return load_jobspec(_path(tmp_path, extra), list(overrides), env={})


def _refusal(tmp_path: Path, *overrides: str, extra: str = "") -> str:
    with pytest.raises(JobSpecError) as caught:
        _job(tmp_path, *overrides, extra=extra)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'job.toml'}: ")
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("overrides", "key", "feature"),
    [
        (['grounding.fallback_when="ungrounded"'], "grounding.fallback_when", "fallback ="),
        (["grounding.fallback_below=0.5"], "grounding.fallback_below", "fallback ="),
        (['grounding.fallback_classes=["a"]'], "grounding.fallback_classes", "fallback ="),
        (['grounding.url_field="url"'], "grounding.url_field", "url_context"),
        (["grounding.location=[48.2, 16.4]"], "grounding.location", "google_maps"),
        (["grounding.maps_widget=true"], "grounding.maps_widget", "google_maps"),
        (["grounding.dynamic_threshold=0.5"], "grounding.dynamic_threshold", "retrieval"),
        (['grounding.datastore="kb1"'], "grounding.datastore", "vertex_ai_search"),
        (['grounding.file_search_stores=["s"]'], "grounding.file_search_stores", "file_search"),
        (['grounding.elasticsearch_index="kb"'], "grounding.elasticsearch_index", "elastic"),
        (["grounding.rag_top_k=3"], "grounding.rag_top_k", "vertex_rag_store"),
        (
            ['grounding.tool="google_maps"', 'grounding.exclude_domains=["a.com"]'],
            "grounding.exclude_domains",
            "google_search",
        ),
        (['batch.gcs_output="gs://b/out"'], "batch.gcs_output", "Vertex"),
        (['source.url="sqlite:///other.db"'], "source.url", "source.query"),
        (['retrieval.url="sqlite:///docs.db"'], "retrieval.url", "retrieval.query"),
    ],
)
def test_a_key_of_a_switched_off_feature_is_ignored_with_one_note(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    overrides: list[str],
    key: str,
    feature: str,
) -> None:
    with caplog.at_level(logging.WARNING, logger="pipeline.job.spec"):
        spec = _job(tmp_path, *overrides)
    (note,) = spec.warnings
    assert note.startswith(f"{key}: ignored: only used with ") and feature in note
    section, _, name = key.partition(".")
    loaded = getattr(spec, section)
    assert getattr(loaded, name) == getattr(type(loaded)(), name)  # back at its default
    logged = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert logged == [f"{tmp_path / 'job.toml'}: {note}"]


def test_ignored_keys_never_reach_the_request(tmp_path: Path) -> None:
    quiet = _job(tmp_path, "grounding.location=[48.2, 16.4]", 'grounding.url_field="url"')
    plain = _job(tmp_path)
    body = orjson.loads(request_builder(quiet).body("q"))
    assert "toolConfig" not in body
    assert body == orjson.loads(request_builder(plain).body("q"))
    assert grounded_call(quiet).urls({"url": "https://example.com/"}) == ()


def test_a_key_that_contradicts_a_feature_in_use_is_still_refused(tmp_path: Path) -> None:
    # Google Search is on: its excluded domains would be sent, and the Developer API has none.
    message = _refusal(tmp_path, 'grounding.exclude_domains=["a.com"]')
    assert "grounding.exclude_domains: Vertex only" in message
    message = _refusal(tmp_path, 'grounding.tool="url_context"', 'grounding.url_field="link"')
    assert "grounding.url_field: 'link' must be listed in source.metadata_fields" in message


def test_the_demo_with_its_fallback_off_loads(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pipeline.job.spec"):
        spec = load_jobspec(JOBS / "demo.toml", ['grounding.fallback=""'], env={})
    assert spec.grounding.fallback == "" and spec.grounding.fallback_when == ""
    assert {note.split(":")[0] for note in spec.warnings} == {
        "grounding.fallback_when",
        "grounding.fallback_below",
    }
    # And with URL context off, its url_field is set aside the same way.
    spec = load_jobspec(JOBS / "demo.toml", ['grounding.tool="google_search"'], env={})
    assert spec.grounding.url_field == ""
    assert any(n.startswith("grounding.url_field: ignored") for n in spec.warnings)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ('fiel = "x.jsonl"\n', "source.fiel: unknown key; did you mean `file`?"),
        ('id_feild = "key"\n', "source.id_feild: unknown key; did you mean `id_field`?"),
        (
            "[limits]\nconcurency = 4\n",
            "limits.concurency: unknown key; did you mean `concurrency`?",
        ),
        ("[sorce]\nx = 1\n", "sorce: unknown key; did you mean `source`?"),
        ("[groundings]\ntool = 'google_search'\n", "did you mean `grounding`?"),
    ],
)
def test_an_unknown_key_or_section_names_the_closest_one(
    tmp_path: Path, extra: str, says: str
) -> None:
    assert says in _refusal(tmp_path, extra=extra)


def test_an_unknown_key_with_nothing_close_suggests_nothing(tmp_path: Path) -> None:
    message = _refusal(tmp_path, extra="[limits]\nzzz = 1\n")
    assert message.endswith("limits.zzz: unknown key")


@pytest.mark.parametrize(
    ("override", "key", "values"),
    [
        ('source.format="xml"', "source.format", ['"auto"', '"jsonl"', '"csv"']),
        ('grounding.tool="bing"', "grounding.tool", ['"google_search"', '"url_context"']),
        ('grounding.tool=["google_search", "bing"]', "grounding.tool", ['"google_maps"']),
        ('model.mode="stream"', "model.mode", ['"online"', '"batch"']),
        ('structure.wire_field="schema"', "structure.wire_field", ['"responseSchema"']),
    ],
)
def test_an_invalid_choice_lists_the_valid_values(
    tmp_path: Path, override: str, key: str, values: list[str]
) -> None:
    message = _refusal(tmp_path, override)
    assert f"{key}" in message and "expected one of" in message
    assert all(value in message for value in values)
