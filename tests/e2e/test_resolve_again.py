"""The emulator by hand: a loopback emulator's redirects are rejected until allow_hosts names
it; ``ground status`` says why, and ``ground resolve --again rejected`` repairs it."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.maintain import resolve_command
from pipeline.commands.results import status_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import sources
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("emulator_key")]
GOOGLE_ONLY = 'resolver.allow_hosts=["vertexaisearch.cloud.google.com"]'


async def test_rejected_sources_are_explained_and_judged_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=11)) as emu:
        wrong = make_job(tmp_path, base_url=emu.base_url, n_questions=6, overrides=[GOOGLE_ONLY])
        assert await run_command(wrong) == 0
        out = capsys.readouterr().out
        assert "list-price estimates" in out and "nothing was billed" in out
        rows = await fetch_rows(wrong.database_url, sa.select(sources.c.resolve_status))
        rejected = sum(status == "rejected" for (status,) in rows)
        assert rejected > 0

        assert await status_command(wrong, as_json=False) == 0
        out = capsys.readouterr().out
        assert "sources rejected, by reason:" in out
        assert f"{rejected}: points at a private, loopback or link-local address" in out

        fixed = make_job(tmp_path, base_url=emu.base_url, n_questions=6)  # allow_hosts: emulator
        assert await resolve_command(fixed, again=("rejected",)) == 0
        out = capsys.readouterr().out
        assert f"judged {rejected} rejected sources again (pending {rejected})" in out

    rows = await fetch_rows(
        fixed.database_url, sa.select(sources.c.resolve_status, sources.c.destination)
    )
    assert not any(status == "rejected" for status, _ in rows)
    resolved = [d for status, d in rows if status == "resolved"]
    assert len(resolved) == rejected and all(d.startswith("https://") for d in resolved)
