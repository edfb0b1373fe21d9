"""A model's lifecycle end to end: the default asks a current model with no sampling
parameter; a shut-down model is refused before any database file is made; a model the API
answers with 404 stops the run at once (exit 2), every other question left pending; the
emulator's own list of shut-down models and its thinking 400."""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest

from pipeline import cli
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.job.sections import DEFAULT_MODEL
from tests.support.jobs import make_job, write_questions


def _post(emu: RunningEmulator, model: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{emu.base_url}/v1beta/models/{model}:generateContent",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "x-goog-api-key": emu.api_key},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


ASK = {"contents": [{"role": "user", "parts": [{"text": "Who was Marie Curie?"}]}]}


def test_a_four_line_job_dry_runs_the_default_with_no_sampling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    write_questions(tmp_path, 2)
    job = tmp_path / "four.toml"
    job.write_text('[job]\nname = "four"\n[source]\nfile = "questions.jsonl"\n')
    assert cli.main(["run", str(job), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"models/{DEFAULT_MODEL}:generateContent" in out
    for key in ('"temperature"', '"topP"', '"topK"'):
        assert key not in out


def test_a_shut_down_model_exits_2_before_any_database_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    spec = make_job(tmp_path, base_url="http://127.0.0.1:1", n_questions=2)
    override = 'model.name="gemini-2.5-flash"'
    assert cli.main(["run", str(spec.path), "--set", override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "gemini-2.5-flash was shut down on 2026-10-16" in err[0]
    assert "its replacement is gemini-3.5-flash" in err[0]
    assert not (tmp_path / "job.sqlite").exists()


def test_a_404_for_the_model_stops_the_run_at_once_with_the_rest_pending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    today = dt.datetime.now(dt.UTC).date().isoformat()
    config = EmulatorConfig(seed=3, shutdowns=frozenset({f"{DEFAULT_MODEL}@{today}"}))
    with running_emulator(config) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=40)
        assert cli.main(["run", str(spec.path)]) == 2
        sent = emu.stats()["requests"]["by_kind"]["developer"]
    assert sent <= spec.limits.concurrency  # the calls on the wire, no more
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("ground: run stopped")]
    assert f"model {DEFAULT_MODEL} is not available (HTTP 404 NOT_FOUND" in line
    assert "left pending" in line
    assert cli.main(["status", str(spec.path), "--json"]) == 0
    document = orjson.loads(capsys.readouterr().out)
    states = document.get("states", document)
    assert states.get("pending") == 40, document


def test_the_emulator_answers_a_shut_down_model_with_googles_404() -> None:
    with running_emulator(EmulatorConfig(seed=1)) as emu:
        status, body = _post(emu, "gemini-2.0-flash", ASK)
        assert status == 404 and body["error"]["status"] == "NOT_FOUND"
        assert body["error"]["message"].startswith("models/gemini-2.0-flash is not found")
        assert _post(emu, "gemini-2.5-flash-lite", ASK)[0] == 404
        assert _post(emu, DEFAULT_MODEL, ASK)[0] == 200
    # a Google from before the shutdowns still serves 2.0
    with running_emulator(EmulatorConfig(seed=1, shutdowns=frozenset())) as emu:
        assert _post(emu, "gemini-2.0-flash", ASK)[0] == 200
    # a model shut down at a date: served the day before, gone from it
    later = EmulatorConfig(seed=1, shutdowns=frozenset({"gemini-3.8-flash@2999-01-01"}))
    with running_emulator(later) as emu:
        assert _post(emu, DEFAULT_MODEL, ASK)[0] == 200


def test_the_emulator_refuses_thinking_level_and_budget_together() -> None:
    both = {
        **ASK,
        "generationConfig": {"thinkingConfig": {"thinkingLevel": "low", "thinkingBudget": 10}},
    }
    with running_emulator(EmulatorConfig(seed=1)) as emu:
        status, body = _post(emu, DEFAULT_MODEL, both)
        assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
        assert "thinking_level and thinking_budget" in body["error"]["message"]
        one = {**ASK, "generationConfig": {"thinkingConfig": {"thinkingLevel": "low"}}}
        assert _post(emu, DEFAULT_MODEL, one)[0] == 200


def test_ground_models_lists_the_named_models_with_status_and_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["models", "--json"]) == 0
    document = orjson.loads(capsys.readouterr().out)
    rows = {(m["match"], m["backend"]): m for m in document["models"]}
    for model in ("gemini-3.5-flash", "gemini-3.1-flash-lite", "gemini-3.6-flash"):
        assert rows[(model, "any")]["status"] == "ga" and rows[(model, "any")]["source"]
    assert rows[("gemini-3.5-flash-lite", "any")]["status"] == "ga"
    assert rows[("gemini-3.1-pro", "any")]["status"] == "preview"
    default = rows[(DEFAULT_MODEL, "any")]
    assert default["status"] == "ga" and default["prices"]["developer"]["input_per_1m"]
    assert default["prices"]["vertex"]["google_search_fee"].startswith("$")
    gone = rows[("gemini-2.5-flash", "any")]
    assert gone["status"] == "shut_down" and gone["replacement"] == "gemini-3.5-flash"
    assert rows[("gemini-2.0-flash", "developer")]["shutdown"] == "2026-06-01"
    assert cli.main(["models"]) == 0
    text = capsys.readouterr().out
    assert f"{DEFAULT_MODEL} [any]: ga" in text
    assert "gemini-2.5-flash [any]: shut down, shutdown 2026-10-16, replacement" in text
