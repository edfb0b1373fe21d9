"""Trial runs: ``ground run --limit N`` / ``--sample N`` / ``--class C`` and ``--dry-run``,
on the demo job against the emulator."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.cli import main
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import load_jobspec
from pipeline.job.states import TERMINAL_STATES
from pipeline.store.tables import questions
from pipeline.store.trial import Trial, sample_key
from tests.support.databases import fetch_rows
from tests.support.demo import DEMO_JOB, DEMO_QUESTIONS, demo_overrides

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("emulator_key")]

# The demo's own emulator settings: no ungrounded answers, so one question is one call 1.
NO_NUDGES = EmulatorConfig(seed=7, ungrounded_share=0)


def _call_1(stats: dict) -> int:
    """Grounded requests (call 1) the emulator saw: those declaring Google Search."""
    return stats["requests"]["by_tool"].get("googleSearch", 0)


async def _finished(database_url: str) -> list[str]:
    rows = await fetch_rows(
        database_url,
        sa.select(questions.c.qid).where(questions.c.state.in_(sorted(TERMINAL_STATES))),
    )
    return sorted(qid for (qid,) in rows)


async def test_limit_20_on_the_demo_makes_exactly_20_call_1_requests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(NO_NUDGES) as emu:
        spec = load_jobspec(DEMO_JOB, demo_overrides(tmp_path, emu.base_url, 200))
        assert await run_command(spec, trial=Trial(limit=20)) == 0
        assert _call_1(emu.stats()) == 20
        out = capsys.readouterr().out
        assert "trial: the first 20: 20 questions, 20 of them still to ask" in out
        assert "200 questions, 20 finished" in out
        # The first 20 in load order, and a rerun takes the same ones: nothing left to ask.
        first = [orjson.loads(line)["id"] for line in DEMO_QUESTIONS.read_text().splitlines()]
        assert await _finished(spec.database_url) == sorted(first[:20])
        assert await run_command(spec, trial=Trial(limit=20)) == 0
        assert "the trial's 20 questions are finished; 0 calls made" in capsys.readouterr().out
        assert _call_1(emu.stats()) == 20
        # --limit 25 goes on with the next 5.
        assert await run_command(spec, trial=Trial(limit=25)) == 0
        assert _call_1(emu.stats()) == 25
    assert await _finished(spec.database_url) == sorted(first[:25])


async def test_sample_is_seeded_and_a_rerun_picks_the_same_questions(tmp_path: Path) -> None:
    with running_emulator(NO_NUDGES) as emu:
        spec = load_jobspec(DEMO_JOB, demo_overrides(tmp_path, emu.base_url, 200))
        assert await run_command(spec, trial=Trial(sample=8, seed=5, qclass="cities")) == 0
        assert _call_1(emu.stats()) == 8
        picked = await _finished(spec.database_url)
        assert await run_command(spec, trial=Trial(sample=8, seed=5, qclass="cities")) == 0
        assert _call_1(emu.stats()) == 8  # the same 8: nothing new asked
    rows = await fetch_rows(spec.database_url, sa.select(questions.c.qid, questions.c.qclass))
    cities = [qid for qid, qclass in rows if qclass == "cities"]
    assert len(cities) > 8
    # The sample is the 8 smallest keys of the seed, whatever the load order.
    assert picked == sorted(sorted(cities, key=lambda qid: sample_key(5, qid))[:8])
    assert sorted(sorted(cities, key=lambda qid: sample_key(6, qid))[:8]) != picked


def test_dry_run_prints_bodies_and_estimate_and_sends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "AIza-secret-test-key-000"
    monkeypatch.setenv("GEMINI_API_KEY", secret)
    with running_emulator(EmulatorConfig(seed=7, api_keys=frozenset({secret}))) as emu:
        args = ["run", str(DEMO_JOB), "--dry-run", "--limit", "2", "--log-format", "json"]
        for line in demo_overrides(tmp_path, emu.base_url, 50):
            args += ["--set", line]
        assert main(args) == 0
        stats = emu.stats()
    assert stats["requests"]["total"] == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "dry run: nothing is sent" in out
    assert "request 1: question q0001" in out and "request 2: question q0002" in out
    assert "request 3:" not in out
    assert '"googleSearch"' in out and "population of Krak" in out
    assert "questions to ask: 2" in out and "expected: $" in out
    assert secret not in out + captured.err
    # Loaded, but not one question asked.
    assert (tmp_path / "demo.sqlite").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--limit", "0"], "--limit: 0: must be at least 1"),
        (["--limit", "3", "--sample", "3"], "not allowed with argument"),
        (["--sample", "20000"], "a sample is at most 10,000"),
    ],
)
def test_trial_flags_are_checked(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", str(DEMO_JOB), *flags])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
