"""429s read by what they say, and 503 storms waited out, end to end against the emulator.

* A bare 429 on a grounded call (the daily bucket's body, but only one) is obeyed
  (``Retry-After``, as seconds or as an HTTP date) and retried without spending an attempt; the
  job is not paused for the day.
* Bare 429s that persist through the daily probe (shortened here) pause grounding for the day:
  the run stops (exit 1) with the questions waiting for the reset, no attempt spent.
* A storm of 503s, counted or timed on the emulator's clock, far longer than the job's
  attempts, ends with every question done and no attempt spent.
* A storm longer than ``[limits] overload_wait_s`` stops the run: exit 1, one line, the
  questions left waiting.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline.clock import utcnow
from pipeline.commands.run import run_command
from pipeline.emulator.clock import FakeClock
from pipeline.emulator.config import EmulatorConfig, ModelQuota
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.limits.backoff import Backoff
from pipeline.limits.probe import ProbeSettings
from pipeline.store.tables import calls, questions
from tests.support.databases import fetch_rows, postgres_database
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio

FAST = Backoff(cap_s=0.2)  # the same waits, shorter: backoff and overload storms alike
# The daily probe, shortened: 3 bare 429s over at least 0.5 s, the waits 0.05 s doubling to 0.2.
SHORT_PROBE = ProbeSettings(bare_429s=3, over_s=0.5, base_s=0.05, cap_s=0.2)
POLL_S = 0.02  # seconds between two looks at the emulator's counters


@pytest.fixture(autouse=True)
def _key(emulator_key: str) -> str:
    return emulator_key  # the Developer API key the emulator takes, in the environment


@asynccontextmanager
async def _database(backend: str) -> AsyncIterator[str]:
    if backend == "sqlite":
        yield "sqlite:///job.sqlite"
        return
    async with postgres_database() as url:
        yield url.replace("postgresql+asyncpg://", "postgresql://")


def _config(**changes: object) -> EmulatorConfig:
    return EmulatorConfig(seed=35, ungrounded_share=0.0).replace(**changes)


async def _questions(url: str) -> list[sa.Row]:
    return await fetch_rows(
        url,
        sa.select(
            questions.c.state,
            questions.c.attempts,
            questions.c.error_class,
            questions.c.next_attempt_at,
        ),
    )


async def _ledger(url: str) -> list[sa.Row]:
    return await fetch_rows(
        url,
        sa.select(calls.c.question_id, calls.c.started_at, calls.c.outcome).order_by(
            calls.c.started_at
        ),
    )


def _errors(emu: RunningEmulator) -> dict[str, int]:
    return emu.stats()["errors"]["by_kind"]


@pytest.mark.parametrize(("form", "at_least_s"), [("seconds", 2.0), ("date", 1.0)])
async def test_one_bare_429_with_retry_after_is_obeyed_and_pauses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str, at_least_s: float
) -> None:
    # One caller, so the wait after the 429 is the run's own: nothing is sent in it. An HTTP
    # date is read against the client's clock, after the answer's trip: under load "2 s from
    # now" may have shrunk, so only a second of it is asserted.
    config = _config(bare_429_requests=1, retry_after_s=2.0, retry_after_form=form)
    with running_emulator(config) as emu:
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=6, overrides=["limits.concurrency=1"]
        )
        assert await run_command(spec, backoff=FAST, daily_probe=SHORT_PROBE) == 0
        assert _errors(emu)["bare_429"] == 1
    err = capsys.readouterr().err
    assert "grounding paused" not in err and "daily daily" not in err
    rows = await _questions(spec.database_url)
    assert [(r.state, r.attempts) for r in rows] == [("done", 1)] * 6  # the 429 cost no attempt
    ledger = await _ledger(spec.database_url)
    assert [c.outcome for c in ledger].count("rate_limited") == 1
    refused = next(i for i, c in enumerate(ledger) if c.outcome == "rate_limited")
    gap = (ledger[refused + 1].started_at - ledger[refused].started_at).total_seconds()
    assert gap >= at_least_s  # Retry-After was obeyed (the probe's own first wait is 0.05 s)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_bare_429s_that_persist_through_the_probe_pause_grounding_for_the_day(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    with running_emulator(_config(bare_429_requests=1_000_000)) as emu:
        async with _database(backend) as database:
            spec = make_job(
                tmp_path,
                base_url=emu.base_url,
                n_questions=20,
                database=database,
                overrides=["limits.concurrency=4"],
            )
            assert await run_command(spec, backoff=FAST, daily_probe=SHORT_PROBE) == 1
            refused = _errors(emu)["bare_429"]
            rows = await _questions(spec.database_url)
            ledger = await _ledger(spec.database_url)
    err = capsys.readouterr().err
    assert "grounding paused until" in err and "persisted" in err and "run again" in err
    assert "daily daily" not in err
    # Never on the first one, and no hammering: the calls in flight, then one probe at a time.
    assert SHORT_PROBE.bare_429s <= refused <= 4 + 8
    assert len(ledger) == refused and {c.outcome for c in ledger} == {"rate_limited"}
    assert {r.state for r in rows} <= {"pending", "retry_wait"}
    assert all(r.attempts == 0 for r in rows)  # nothing spent on a quota
    # The questions that met the day's pause wait for the reset (those held by the probe
    # before it keep their short wait: the next run probes afresh).
    later = utcnow() + dt.timedelta(minutes=10)
    assert any(r.state == "retry_wait" and r.next_attempt_at > later for r in rows)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_503_storm_longer_than_every_attempt_is_waited_out(
    tmp_path: Path, backend: str
) -> None:
    storm = 80  # 10 refusals a question on average; 5 attempts would fail them all
    with running_emulator(_config(storm_503_requests=storm)) as emu:
        async with _database(backend) as database:
            spec = make_job(
                tmp_path,
                base_url=emu.base_url,
                n_questions=8,
                database=database,
                overrides=["limits.concurrency=4", "limits.max_attempts=5"],
            )
            assert await run_command(spec, backoff=FAST) == 0
            assert _errors(emu)["storm_503"] == storm
            rows = await _questions(spec.database_url)
            ledger = await _ledger(spec.database_url)
    assert [(r.state, r.attempts) for r in rows] == [("done", 1)] * 8
    overloaded = Counter(c.question_id for c in ledger if c.outcome == "http_503")
    assert sum(overloaded.values()) == storm  # every refusal is in the ledger, at no cost
    assert max(overloaded.values()) > 5  # more than the attempts a question has


async def test_a_timed_storm_on_the_emulators_clock_is_waited_out(tmp_path: Path) -> None:
    clock = FakeClock()
    with running_emulator(_config(storm_503_s=600.0), clock=clock) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=8,
            overrides=["limits.concurrency=4", "limits.max_attempts=2"],
        )
        status: list[int] = []

        async def run() -> None:
            status.append(await run_command(spec, backoff=FAST))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            try:
                with anyio.fail_after(120):
                    while _errors(emu).get("storm_503", 0) < 20:  # many tries a question
                        await anyio.sleep(POLL_S)
            except BaseException:
                group.cancel_scope.cancel()  # the storm would outlast the test
                raise
            clock.advance(600.0)  # the storm is over
        assert status == [0]
    rows = await _questions(spec.database_url)
    assert [(r.state, r.attempts) for r in rows] == [("done", 1)] * 8


async def test_a_storm_beyond_overload_wait_s_stops_the_run_with_the_questions_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(_config(storm_503_requests=1_000_000)) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=10,
            overrides=["limits.concurrency=4", "limits.overload_wait_s=0.5"],
        )
        assert await run_command(spec, backoff=FAST) == 1
        assert _errors(emu)["storm_503"] > 0
    err = capsys.readouterr().err
    stops = [line for line in err.splitlines() if "overload_wait_s" in line]
    assert stops and "Traceback" not in err
    assert "overloaded" in stops[0] and "run again later" in stops[0]
    rows = await _questions(spec.database_url)
    assert {r.state for r in rows} <= {"pending", "retry_wait"}  # none failed, none lost
    assert all(r.attempts == 0 for r in rows)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_bare_429_once_the_jobs_own_daily_count_is_reached_is_the_days_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    # The job says 10 grounded prompts a day, and has drawn all 10 (one grant); the server's
    # bucket holds 5. Its first bare 429 is then evidence enough: no probe (whose default
    # would take minutes), the day's pause at once.
    config = _config(quotas={"*": ModelQuota(grounded_rpd=5)})
    with running_emulator(config) as emu:
        async with _database(backend) as database:
            spec = make_job(
                tmp_path,
                base_url=emu.base_url,
                n_questions=12,
                database=database,
                overrides=["limits.concurrency=1", "limits.grounded_prompts_per_day=10"],
            )
            assert await run_command(spec, backoff=FAST) == 1
            assert emu.stats()["quota_rejections"]["by_bucket"]["grounded_rpd"] == 1
            rows = await _questions(spec.database_url)
    err = capsys.readouterr().err
    assert "grounding paused until" in err and "grounded_prompts_per_day (10) is used up" in err
    assert Counter(r.state for r in rows)["done"] == 5
    assert all(r.attempts == (1 if r.state == "done" else 0) for r in rows)
