"""A hostile judge (the emulator's ``hostile_judge_share``): quotes with a NUL or a lone
surrogate, a 60-character retrieval status, a 5,000-digit claim number, "supported" on the
quote "e". ``ground verify`` finishes without a traceback, every paid verification call is in
the ledger (as many as the emulator answered), and none of the spoilt verdicts counts."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.commands.verify import verify_command
from pipeline.emulator import corpus, verification
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import load_jobspec
from pipeline.store.tables import calls, citation_verdicts
from pipeline.verify.quotes import text_reason, url_reason
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.jobs import make_job

pytestmark = [pytest.mark.usefixtures("emulator_key"), pytest.mark.timeout(600)]


async def _check(tmp_path: Path, database: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    config = EmulatorConfig(seed=5, ungrounded_share=0.0, hostile_judge_share=0.6)
    with running_emulator(config) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=40, database=database)
        for model in ("gemini-3.8-flash", "gemini-3.5-flash-lite"):  # the job's, then another
            spec = load_jobspec(
                tmp_path / "job.toml", ["verify.enabled=true", f'verify.model="{model}"']
            )
            if model == "gemini-3.8-flash":
                assert await run_command(spec) == 0
            capsys.readouterr()
            assert await verify_command(spec) == 0
            said = capsys.readouterr()
            assert "Traceback" not in said.err
            assert " verdicts not taken (" in said.out
        stats = emu.stats()["verification"]
    assert stats["hostile"] > 0
    ledger = await fetch_rows(
        spec.database_url,
        sa.select(calls.c.id).where(calls.c.step == "verify", calls.c.http_status == 200),
    )
    assert len(ledger) == stats["requests"]
    rows = await fetch_rows(spec.database_url, sa.select(citation_verdicts))
    assert rows and all(r.call_id is not None for r in rows)
    assert not any("\x00" in (r.quote or "") for r in rows)
    spoilt = [r for r in rows if r.reason is not None]
    assert spoilt
    for r in rows:
        if r.verdict == "supported" and r.url is None:  # a text source: the quote decided
            assert r.reason is None and len(r.quote or "") >= 12


@pytest.mark.anyio
async def test_a_hostile_judge_on_sqlite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await _check(tmp_path, None, capsys)


def test_a_hostile_judge_on_postgresql(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with postgres_job_database() as url:
        anyio.run(_check, tmp_path, url, capsys)


def test_an_honest_judge_loses_nothing_to_the_quote_rules() -> None:
    """Every (claim, cited passage) pair of the emulator's corpus, judged as its honest judge
    does (supported; the claim quoted where the page holds it, else the page's first words):
    no text pair becomes no_verdict, no URL pair is flagged."""
    pairs = 0
    for entry in (*corpus.WEB, *corpus.MAPS):
        answer = entry.answer
        for i, source in enumerate(answer.sources):
            cited = [s.text for s in answer.sentences if i in s.cites]
            passage = " ".join(cited) or source.page_title
            page = verification.pages()[source.url]
            for claim in cited:
                pairs += 1
                quote = claim if claim in passage else passage[: verification.QUOTE_CHARS]
                assert text_reason("supported", quote, passage, claim) is None, claim
                url_quote = claim if claim in page else page[: verification.QUOTE_CHARS]
                assert url_reason("supported", url_quote, claim) is None, claim
    assert pairs >= 50
