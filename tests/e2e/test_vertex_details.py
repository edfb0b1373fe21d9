"""Vertex details end to end: the Maps widget token, excludeDomains (honoured by the emulator,
counted by status), and the SDK's backend switch, on jobs run against the emulator."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.results import ExportOptions, export_command, status_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.grounding.domains import from_excluded
from pipeline.store.tables import answers, sources
from tests.support.credentials import service_account_info
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio

VERTEX = ['model.backend="vertex"', 'model.project="proj-1"', 'model.location="us-central1"']


@pytest.fixture
def vertex_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def install(token_uri: str) -> None:
        path = tmp_path / "service-account.json"
        path.write_text(json.dumps(service_account_info(token_uri)), encoding="utf-8")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        monkeypatch.delenv("GEMINI_API_KEY", raising=False)
        monkeypatch.delenv("GOOGLE_API_KEY", raising=False)

    return install


async def test_the_maps_widget_token_comes_only_when_asked_and_is_exported(
    tmp_path: Path, emulator_key: str
) -> None:
    with running_emulator(EmulatorConfig(seed=71, ungrounded_share=0.0)) as emu:
        plain = make_job(
            tmp_path / "plain",
            base_url=emu.base_url,
            n_questions=4,
            overrides=['grounding.tool="google_maps"'],
        )
        widget = make_job(
            tmp_path / "widget",
            base_url=emu.base_url,
            n_questions=4,
            overrides=['grounding.tool="google_maps"', "grounding.maps_widget=true"],
        )
        assert await run_command(plain) == 0
        assert await run_command(widget) == 0
    without = await fetch_rows(plain.database_url, sa.select(answers.c.maps_widget_token))
    assert len(without) == 4 and all(row[0] is None for row in without)
    tokens = await fetch_rows(widget.database_url, sa.select(answers.c.maps_widget_token))
    assert len(tokens) == 4 and all(row[0].startswith("widgetcontent/") for row in tokens)
    out = tmp_path / "export.jsonl"
    assert await export_command(widget, ExportOptions(out=str(out))) == 0
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    exported = {r["maps_widget_token"] for r in records}
    assert exported == {row[0] for row in tokens}


async def _excluded_in_status(spec, capsys: pytest.CaptureFixture[str]) -> int:
    capsys.readouterr()
    assert await status_command(spec, as_json=True) == 0
    return json.loads(capsys.readouterr().out)["excluded_domain_sources"]


async def test_exclude_domains_is_honoured_and_status_counts_what_leaks(
    tmp_path: Path, vertex_credentials, capsys: pytest.CaptureFixture[str]
) -> None:
    excluded = ['grounding.exclude_domains=["wikipedia.org"]']
    with running_emulator(EmulatorConfig(seed=72, ungrounded_share=0.0)) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        honoured = make_job(
            tmp_path / "honoured", base_url=emu.base_url, n_questions=8, overrides=VERTEX + excluded
        )
        assert await run_command(honoured) == 0
    with running_emulator(
        EmulatorConfig(seed=72, ungrounded_share=0.0, exclude_domains_leak_share=1.0)
    ) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        leaky = make_job(
            tmp_path / "leaky", base_url=emu.base_url, n_questions=8, overrides=VERTEX + excluded
        )
        assert await run_command(leaky) == 0
    kept = await fetch_rows(honoured.database_url, sa.select(sources))
    assert kept and not any(
        from_excluded(s.domain, s.title, s.destination, ["wikipedia.org"]) for s in kept
    )
    assert await _excluded_in_status(honoured, capsys) == 0
    leaked = await fetch_rows(leaky.database_url, sa.select(sources))
    expected = sum(
        from_excluded(s.domain, s.title, s.destination, ["wikipedia.org"]) for s in leaked
    )
    assert expected > 0
    assert await _excluded_in_status(leaky, capsys) == expected
    assert await status_command(leaky, as_json=False) == 0
    assert f"sources from excluded domains: {expected}" in capsys.readouterr().out


async def test_the_sdk_switch_makes_a_job_without_a_backend_run_on_vertex(
    tmp_path: Path, vertex_credentials, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_emulator(EmulatorConfig(seed=73)) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        monkeypatch.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj-1")
        monkeypatch.delenv("GOOGLE_CLOUD_LOCATION", raising=False)
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=3)
        assert spec.model.backend == "vertex"
        assert await run_command(spec) == 0
        by_kind = emu.stats()["requests"]["by_kind"]
    assert by_kind.get("vertex") == 3 and "developer" not in by_kind
