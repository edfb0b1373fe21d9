"""Each grounding tool under a budget on the emulator: the run is not refused, and the ledger's
cost is complete wherever the price table knows the tool's fee (or knows it has none)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import answers, calls
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio

# The fees under test are those of the 2.5 rows (a per-prompt Search fee, confirmed Vertex
# prices): a 2.5 model, on a Google from before its shutdown (the run is not the command line,
# so no load-time refusal).
BUDGET = [
    "limits.budget_usd=5.0",
    "limits.max_search_queries=3",
    'model.name="gemini-2.5-flash"',
]
VERTEX = ['model.backend="vertex"', 'model.project="proj-1"', 'model.location="us-central1"']


@pytest.mark.parametrize(
    ("overrides", "units"),
    [
        (['grounding.tool="url_context"'], 0),  # no fee of its own: fetched pages are input
        (['grounding.tool=["google_search", "url_context"]'], 1),  # Search's per-prompt fee
        (
            [
                'grounding.tool="file_search"',
                'grounding.file_search_stores=["fileSearchStores/kb"]',
            ],
            0,
        ),
        (
            ['model.name="gemini-1.5-flash-002"', 'grounding.tool="google_search_retrieval"'],
            1,
        ),
    ],
    ids=["url_context", "url_context+search", "file_search", "google_search_retrieval"],
)
async def test_budgeted_developer_tools_cost_complete(
    tmp_path: Path, emulator_key: str, overrides: list[str], units: int
) -> None:
    with running_emulator(
        EmulatorConfig(shutdowns=frozenset(), seed=91, ungrounded_share=0.0)
    ) as emu:
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=4, overrides=BUDGET + overrides
        )
        assert await run_command(spec) == 0
    await _assert_ledger_complete(spec.database_url, units)


async def test_budgeted_enterprise_web_search_cost_complete_and_placeholder_warned(
    tmp_path: Path, vertex_credentials, caplog: pytest.LogCaptureFixture
) -> None:
    with running_emulator(
        EmulatorConfig(shutdowns=frozenset(), seed=92, ungrounded_share=0.0)
    ) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=3,
            overrides=[*BUDGET, *VERTEX, 'grounding.tool="enterprise_web_search"'],
        )
        with caplog.at_level(logging.WARNING):
            assert await run_command(spec) == 0
    await _assert_ledger_complete(spec.database_url, 1)
    # Its fee is a placeholder: the run says so.
    assert any("placeholder" in r.getMessage() for r in caplog.records)


async def test_vertex_search_alone_does_not_warn_about_another_tools_placeholder(
    tmp_path: Path, vertex_credentials, caplog: pytest.LogCaptureFixture
) -> None:
    with running_emulator(
        EmulatorConfig(shutdowns=frozenset(), seed=93, ungrounded_share=0.0)
    ) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=2, overrides=BUDGET + VERTEX)
        with caplog.at_level(logging.WARNING):
            assert await run_command(spec) == 0
    assert not any("placeholder" in r.getMessage() for r in caplog.records)


async def _assert_ledger_complete(database_url: str, units: int) -> None:
    stored = await fetch_rows(database_url, sa.select(answers))
    assert stored and all(a.grounded for a in stored)
    ground = [c for c in await fetch_rows(database_url, sa.select(calls)) if c.step == "ground"]
    assert len(ground) == len(stored)
    assert all(c.cost_complete and c.cost_micro_usd > 0 for c in ground)
    assert {c.grounding_units for c in ground} == {units}


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
