"""Vertex AI (service-account OAuth, for real), data-store and Maps grounding, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import answers, metadata, sources
from tests.support.credentials import service_account_info
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio

DATASTORE = "projects/proj-1/locations/global/collections/default_collection/dataStores/kb"


def _service_account_file(directory: Path, token_uri: str) -> Path:
    info = service_account_info(token_uri)
    path = directory / "service-account.json"
    path.write_text(json.dumps(info), encoding="utf-8")
    return path


async def _all_stored_text(url: str) -> str:
    """Every value of every table, as text: what a leak check searches."""
    chunks = []
    for table in metadata.sorted_tables:
        chunks.extend(repr(tuple(row)) for row in await fetch_rows(url, sa.select(table)))
    return "\n".join(chunks)


@pytest.fixture
def vertex_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def install(token_uri: str) -> None:
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(_service_account_file(tmp_path, token_uri))
        )
        monkeypatch.delenv("GEMINI_API_KEY", raising=False)
        monkeypatch.delenv("GOOGLE_API_KEY", raising=False)

    return install


async def test_vertex_with_a_service_account_and_vertex_ai_search(
    tmp_path: Path, vertex_credentials
) -> None:
    with running_emulator(EmulatorConfig(seed=61, ungrounded_share=0.0)) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=12,
            overrides=[
                'model.backend="vertex"',
                'model.project="proj-1"',
                'model.location="us-central1"',
                'grounding.tool="vertex_ai_search"',
                f'grounding.datastore="{DATASTORE}"',
            ],
        )
        assert await run_command(spec) == 0
        stats = emu.stats()
    assert stats["requests"]["by_kind"]["vertex"] == 12
    assert stats["requests"]["by_kind"]["token"] >= 1  # google-auth signed a JWT and got a token
    assert stats["requests"]["by_tool"].get("vertexAiSearch", 0) == 12
    stored = await fetch_rows(spec.database_url, sa.select(answers))
    assert len(stored) == 12 and all(a.grounded and a.retrieval_queries for a in stored)
    rows = await fetch_rows(spec.database_url, sa.select(sources))
    docs = [s for s in rows if s.kind == "retrievedContext"]
    assert docs and all(s.document_name and s.text for s in docs)
    assert all(s.resolve_status in ("direct", "no_uri") for s in docs)  # not redirects
    assert all(s.destination == s.uri for s in docs if s.resolve_status == "direct")
    stored_text = await _all_stored_text(spec.database_url)
    assert "Bearer" not in stored_text and "PRIVATE KEY" not in stored_text


async def test_google_maps_grounding_keeps_places(tmp_path: Path, emulator_key: str) -> None:
    with running_emulator(EmulatorConfig(seed=62, ungrounded_share=0.0)) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=10,
            overrides=['grounding.tool="google_maps"'],
        )
        assert await run_command(spec) == 0
    rows = await fetch_rows(spec.database_url, sa.select(sources))
    places = [s for s in rows if s.kind == "maps"]
    assert places and all(s.place_id and s.place_id.startswith("places/") for s in places)
    assert all(s.resolve_status in ("direct", "resolved", "no_uri") for s in places)


async def test_the_api_key_never_reaches_the_database(tmp_path: Path, emulator_key: str) -> None:
    with running_emulator(EmulatorConfig(seed=63)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10)
        assert await run_command(spec) == 0
    assert emulator_key not in await _all_stored_text(spec.database_url)
