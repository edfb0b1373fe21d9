"""Each grounding tool end to end on the emulator, on the backend it belongs to: stored, shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.results import status_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import answers, sources, supports
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio


async def _run(tmp_path: Path, seed: int, overrides: list[str]):
    with running_emulator(EmulatorConfig(seed=seed, ungrounded_share=0.0)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=6, overrides=overrides)
        assert await run_command(spec) == 0
        stats = emu.stats()
    stored = await fetch_rows(spec.database_url, sa.select(answers))
    rows = await fetch_rows(spec.database_url, sa.select(sources))
    sups = await fetch_rows(spec.database_url, sa.select(supports))
    assert len(stored) == 6 and all(a.grounded for a in stored)
    by_answer = {a.id: a for a in stored}
    for s in sups:  # every stored support reads its text in the stored answer
        assert by_answer[s.answer_id].text[s.char_start : s.char_end] == s.text
    return spec, stats, stored, rows, sups


async def test_google_search_on_gemini_3_counts_tool_parts(
    tmp_path: Path, emulator_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, _, stored, _, sups = await _run(tmp_path, 81, ['model.name="gemini-3-flash-preview"'])
    assert all(a.tool_parts == 2 for a in stored)
    assert sups and {s.offsets_over for s in sups} == {"answer"}
    assert await status_command(spec, as_json=False) == 0
    assert "answers with tool-call or code parts: 6" in capsys.readouterr().out


async def test_file_search(tmp_path: Path, emulator_key: str) -> None:
    _, stats, _, rows, _ = await _run(
        tmp_path,
        82,
        ['grounding.tool="file_search"', 'grounding.file_search_stores=["fileSearchStores/kb"]'],
    )
    assert stats["requests"]["by_tool"].get("fileSearch", 0) == 6
    docs = [s for s in rows if s.kind == "retrievedContext"]
    assert docs and all(s.file_search_store == "fileSearchStores/kb" for s in docs)
    assert all(s.custom_metadata and s.text and s.uri is None for s in docs)
    assert all(s.resolve_status == "no_uri" for s in docs)


async def test_url_context_with_search(tmp_path: Path, emulator_key: str) -> None:
    _, _, stored, _, sups = await _run(
        tmp_path, 83, ['grounding.tool=["google_search", "url_context"]']
    )
    assert all(a.url_context_statuses for a in stored)
    assert sups


async def test_url_context_alone(tmp_path: Path, emulator_key: str) -> None:
    _, _, stored, rows, sups = await _run(tmp_path, 84, ['grounding.tool="url_context"'])
    assert all(a.url_context_statuses for a in stored)
    assert all(any("shift -1" in w for w in a.warnings) for a in stored)  # the 1-byte quirk
    assert rows and all(s.kind == "web" for s in rows) and sups


async def test_enterprise_web_search_on_vertex(tmp_path: Path, vertex_credentials) -> None:
    with running_emulator(EmulatorConfig(seed=85, ungrounded_share=0.0)) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=4,
            overrides=[
                'model.backend="vertex"',
                'model.project="proj-1"',
                'model.location="us-central1"',
                'grounding.tool="enterprise_web_search"',
                'grounding.exclude_domains=["example.com"]',
            ],
        )
        assert await run_command(spec) == 0
        stats = emu.stats()
    assert stats["requests"]["by_tool"].get("enterpriseWebSearch", 0) == 4
    stored = await fetch_rows(spec.database_url, sa.select(answers))
    assert len(stored) == 4 and all(a.grounded for a in stored)


@pytest.fixture
def vertex_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from tests.support.credentials import service_account_info

    def install(token_uri: str) -> None:
        path = tmp_path / "service-account.json"
        path.write_text(json.dumps(service_account_info(token_uri)), encoding="utf-8")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        monkeypatch.delenv("GEMINI_API_KEY", raising=False)
        monkeypatch.delenv("GOOGLE_API_KEY", raising=False)

    return install
