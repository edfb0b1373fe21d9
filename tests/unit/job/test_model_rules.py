"""The job's models against the table at load, and what each generation's request carries."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import msgspec
import orjson

from pipeline.job.calls import request_builder, structure_call
from pipeline.job.model_rules import (
    generation_settings,
    model_refusal,
    model_warnings,
    thinking_config,
)
from pipeline.job.sections import RawJob
from pipeline.job.spec import load_jobspec

TODAY = dt.date(2026, 12, 6)


def raw(**model: object) -> RawJob:
    return msgspec.convert(
        {"job": {"name": "t"}, "source": {"file": "q.jsonl"}, "model": model}, RawJob
    )


def test_a_shut_down_model_is_refused_naming_its_date_and_replacement() -> None:
    line = model_refusal(raw(name="gemini-2.5-flash"), today=TODAY)
    assert line == (
        "model.name: gemini-2.5-flash was shut down on 2026-10-16; its replacement is"
        " gemini-3.5-flash (`ground models` lists the current ones)"
    )
    line = model_refusal(raw(name="gemini-2.0-flash-001"), today=TODAY)
    assert line is not None and "shut down on 2026-06-01" in line
    assert "no replacement is announced; gemini-3.8-flash is current" in line
    assert model_refusal(raw(), today=TODAY) is None
    # before its date the same model is only deprecated
    assert model_refusal(raw(name="gemini-2.5-flash"), today=dt.date(2026, 10, 1)) is None


def test_a_shutdown_within_60_days_warns() -> None:
    (warning,) = model_warnings(raw(name="gemini-2.5-flash"), today=dt.date(2026, 9, 1))
    assert warning.startswith("model.name: gemini-2.5-flash shuts down on 2026-10-16, in 45 days;")
    assert "gemini-3.5-flash" in warning and "ground canary" in warning
    assert model_warnings(raw(name="gemini-2.5-flash"), today=dt.date(2026, 7, 1)) == ()


def test_a_preview_and_an_unknown_id_warn_but_load() -> None:
    (preview,) = model_warnings(raw(name="gemini-3.1-pro-preview"), today=TODAY)
    assert "is a preview: previews are switched off at short notice" in preview
    (unknown,) = model_warnings(raw(name="gemini-4-flash"), today=TODAY)
    assert "gemini-4-flash is not in the model table" in unknown
    assert model_warnings(raw(), today=TODAY) == ()


def test_a_sampling_parameter_set_for_a_model_that_deprecates_it_warns() -> None:
    warnings = model_warnings(raw(temperature=0.5, top_k=3), today=TODAY)
    assert [w.split(":")[0] for w in warnings] == ["model.temperature", "model.top_k"]
    assert all("deprecated for gemini-3.8-flash" in w for w in warnings)


def test_thinking_per_generation_never_both() -> None:
    assert thinking_config("gemini-3.8-flash", "developer", "low") == {"thinkingLevel": "low"}
    assert thinking_config("gemini-2.5-flash", "developer", "low") == {"thinkingBudget": 1024}
    assert thinking_config("gemini-2.5-pro", "vertex", "minimal") == {"thinkingBudget": 128}
    assert thinking_config("gemini-4-flash", "developer", "high") == {"thinkingLevel": "high"}
    assert thinking_config("my-tuned-model", "developer", "high") is None
    assert thinking_config("gemini-3.8-flash", "developer", "") is None
    assert generation_settings("gemini-3.8-flash", "developer", temperature=None) == {}


def _job(tmp_path: Path, model: str) -> Path:
    (tmp_path / "q.jsonl").write_text('{"id": "1", "question": "x"}\n')
    (tmp_path / "s.json").write_text('{"type": "object", "properties": {"a": {"type": "string"}}}')
    path = tmp_path / "job.toml"
    path.write_text(
        f'[job]\nname = "t"\n[source]\nfile = "q.jsonl"\n{model}\n'
        '[structure]\nenabled = true\nschema = "s.json"\n'
    )
    return path


def _config(body: bytes) -> dict[str, object]:
    return orjson.loads(body)["generationConfig"]


def test_a_four_line_job_sends_no_sampling_parameter(tmp_path: Path) -> None:
    spec = load_jobspec(_job(tmp_path, ""))
    assert spec.model.name == "gemini-3.8-flash"
    config = _config(request_builder(spec).body("q"))
    assert config == {"maxOutputTokens": 8192}
    call_2 = structure_call(spec)
    assert call_2 is not None and call_2.model == "gemini-3.8-flash"
    assert not {"temperature", "topP", "topK"} & set(call_2.generation)


def test_each_generation_gets_its_thinking_key_on_both_calls(tmp_path: Path) -> None:
    for model, expected in (
        ("gemini-3.8-flash", {"thinkingLevel": "medium"}),
        ("gemini-2.5-flash", {"thinkingBudget": 8192}),
    ):
        path = _job(tmp_path, f'[model]\nname = "{model}"\nthinking = "medium"\ntemperature = 0.3')
        spec = load_jobspec(path)
        config = _config(request_builder(spec).body("q"))
        assert config == {"maxOutputTokens": 8192, "temperature": 0.3, "thinkingConfig": expected}
        call_2 = structure_call(spec)
        assert call_2 is not None and call_2.generation == {"thinkingConfig": expected}
