"""Batch mode end to end on the emulator: stored like online, priced at batch rates, retried
under the normal rules, and the batch's links measured."""

from __future__ import annotations

import asyncio
import re
import time
import warnings
from pathlib import Path

import anyio
import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.batch import batch_cancel_command
from pipeline.commands.maintain import estimate_command
from pipeline.commands.results import status_command
from pipeline.commands.run import run_command
from pipeline.costs.charges import call_cost
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.emulator.clock import FakeClock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.wire import decode_response
from pipeline.limits.backoff import Backoff
from pipeline.store.engine import create_engine
from pipeline.store.tables import answers, batches, calls, questions, sources
from tests.support.jobs import make_job
from tests.support.waiting import wait_until

pytestmark = pytest.mark.anyio

BATCH = [
    'model.mode="batch"',
    "batch.poll_initial_s=0.02",
    "batch.poll_max_s=0.2",
]


async def _rows(url: str, query: sa.Select) -> list[sa.Row]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return list((await connection.execute(query)).all())
    finally:
        await engine.dispose()


def _batch_price():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        return load_prices().for_batch("gemini-3.8-flash", "developer")


async def test_a_batch_run_stores_answers_at_batch_prices(
    tmp_path: Path, emulator_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = EmulatorConfig(seed=5, batch_delay_s=0.2)
    with running_emulator(config) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=40, overrides=BATCH)
        assert await run_command(spec) == 0
        # The run's summary is batch mode's own figures, not an empty online run's.
        said = capsys.readouterr().out
        assert re.search(r"^run: 40 questions finished in \d+\.\d s \(", said, re.M), said
        assert "  batches: 1 created; 40 result lines stored" in said
        assert re.search(
            r"^  batch wall time: submitting \d+\.\d s, waiting for results \d+\.\d s,"
            r" storing \d+\.\d s$",
            said,
            re.M,
        ), said
        assert "0 calls" not in said and "latency: mean 0 ms" not in said
        stats = emu.stats()
        assert stats["batch"]["batches_created"] == 1
        assert stats["batch"]["batch_requests"] == 40
        assert stats["requests"]["by_kind"].get("developer", 0) == 0  # no online call
        states = await _rows(
            spec.database_url, sa.select(questions.c.state, sa.func.count()).group_by("state")
        )
        assert sum(n for _, n in states) == 40
        assert {s for s, _ in states} <= {"done", "ungrounded"}
        price = _batch_price()
        rows = await _rows(
            spec.database_url,
            sa.select(calls.c.cost_micro_usd, answers.c.raw_response).join(
                answers, answers.c.question_id == calls.c.question_id
            ),
        )
        assert len(rows) == 40
        for cost, raw in rows:
            response = decode_response(raw.encode())
            expected = call_cost(
                price,
                response.usage_metadata,
                response.candidates[0].grounding_metadata,
                tool="google_search",
            )
            assert cost == expected.micro_usd()
        resolved = await _rows(
            spec.database_url,
            sa.select(sources.c.resolve_status, sa.func.count()).group_by("resolve_status"),
        )
        assert dict(resolved).get("resolved", 0) > 0 and "pending" not in dict(resolved)
        capsys.readouterr()
        assert await status_command(spec, as_json=True) == 0
        document = orjson.loads(capsys.readouterr().out)
        (batch,) = document["batches"]
        assert batch["state"] == "JOB_STATE_SUCCEEDED" and batch["answered"] == 40
        assert batch["links_resolved"] > 0 and batch["links_expired_share"] == 0.0


async def test_estimate_prices_batch_mode_at_batch_rates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_job(tmp_path, base_url="http://127.0.0.1:1", n_questions=10, overrides=BATCH)
    assert await estimate_command(spec) == 0
    batch_out = capsys.readouterr().out
    assert "gemini-3.8-flash [batch]" in batch_out
    online = make_job(tmp_path / "online", base_url="http://127.0.0.1:1", n_questions=10)
    assert await estimate_command(online) == 0
    online_out = capsys.readouterr().out

    def expected(out: str) -> float:
        line = next(x for x in out.splitlines() if x.startswith("expected: $"))
        return float(line.split("$")[1].split(" ")[0])

    assert expected(batch_out) < expected(online_out)


async def test_failed_rows_and_an_expired_batch_are_retried(
    tmp_path: Path, emulator_key: str
) -> None:
    config = EmulatorConfig(
        seed=8, batch_delay_s=0.05, batch_failed_row_share=0.3, batch_expire_first=1
    )
    with running_emulator(config) as emu:
        # A row fails with probability 0.3 in each batch it is in, and which batch a retried
        # question joins depends on timing. After the expired batch's attempt, 11 more: the
        # chance that one of the 30 questions fails all of them is 30 x 0.3^11 = 5e-5 a run
        # (with 8 attempts it was 30 x 0.3^7 = 0.7 %, and a stress run met it).
        overrides = [*BATCH, "limits.max_attempts=12"]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=30, overrides=overrides)
        assert await run_command(spec, backoff=Backoff(cap_s=0.2)) == 0
        stats = emu.stats()["batch"]
        # The expired batch, one with failed rows, then retries until none is left.
        assert stats["batches_created"] >= 3
        rows = await _rows(spec.database_url, sa.select(batches))
        assert rows[0].state == "JOB_STATE_EXPIRED" and rows[0].returned == 30
        assert sum(r.failed_rows for r in rows) > 0
        states = dict(
            await _rows(
                spec.database_url,
                sa.select(questions.c.state, sa.func.count()).group_by("state"),
            )
        )
        assert set(states) <= {"done", "ungrounded"}
        attempts = await _rows(spec.database_url, sa.select(sa.func.max(questions.c.attempts)))
        assert attempts[0][0] >= 2  # the expired batch spent an attempt


async def test_no_wait_returns_once_submitted_and_a_later_run_collects(
    tmp_path: Path, emulator_key: str
) -> None:
    clock = FakeClock()
    with running_emulator(EmulatorConfig(seed=2, batch_delay_s=3600.0), clock=clock) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10, overrides=BATCH)
        assert await run_command(spec, no_wait=True) == 0
        (row,) = await _rows(spec.database_url, sa.select(batches))
        assert row.name is not None and row.phase == "submitted"
        leased = await _rows(spec.database_url, sa.select(questions.c.lease_owner).distinct())
        assert leased == [(f"batch:{row.id}",)]
        clock.advance(3600)
        assert await run_command(spec) == 0
        assert emu.stats()["batch"]["batches_created"] == 1
        done = await _rows(
            spec.database_url,
            sa.select(sa.func.count()).where(questions.c.state.in_(["done", "ungrounded"])),
        )
        assert done[0][0] == 10


async def test_batch_cancel_stops_the_batch_and_the_next_run_asks_again(
    tmp_path: Path, emulator_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    with running_emulator(EmulatorConfig(seed=3, batch_delay_s=3600.0), clock=clock) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10, overrides=BATCH)
        assert await run_command(spec, no_wait=True) == 0
        (row,) = await _rows(spec.database_url, sa.select(batches))
        capsys.readouterr()
        assert await batch_cancel_command(spec) == 0
        assert f"cancel requested: {row.name}" in capsys.readouterr().out
        # The next run collects the cancelled batch and sends its questions in a new one,
        # which ends once the emulator's clock has moved on.
        run = asyncio.create_task(run_command(spec, backoff=Backoff(cap_s=0.2)))
        await anyio.to_thread.run_sync(
            wait_until,
            lambda: emu.stats()["batch"]["batches_created"] == 2,
            "the run created a second batch",
        )
        clock.advance(3600)
        assert await run == 0
        states = await _rows(spec.database_url, sa.select(batches.c.state).order_by(batches.c.id))
        assert [s for (s,) in states] == ["JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"]
        done = await _rows(
            spec.database_url,
            sa.select(sa.func.count()).where(questions.c.state.in_(["done", "ungrounded"])),
        )
        assert done[0][0] == 10
        capsys.readouterr()
        assert await batch_cancel_command(spec) == 0
        assert "no running batch to cancel" in capsys.readouterr().out


async def test_links_older_than_their_lifetime_lose_their_destinations(
    tmp_path: Path, emulator_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The server's clock starts two hours back and catches up with ours when the batch ends,
    # so the links' age is the same on both sides: two hours.
    clock = FakeClock(start=time.time() - 7200)
    config = EmulatorConfig(seed=6, batch_delay_s=7200.0, redirect_ttl_s=3600.0)
    with running_emulator(config, clock=clock) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10, overrides=BATCH)
        assert await run_command(spec, no_wait=True) == 0
        clock.advance(7200)  # the batch ends two hours after it was created
        assert await run_command(spec) == 0
    statuses = dict(
        await _rows(
            spec.database_url,
            sa.select(sources.c.resolve_status, sa.func.count()).group_by("resolve_status"),
        )
    )
    assert statuses.get("expired", 0) > 0 and "resolved" not in statuses
    capsys.readouterr()
    assert await status_command(spec, as_json=True) == 0
    (batch,) = orjson.loads(capsys.readouterr().out)["batches"]
    assert batch["links_expired_share"] == 1.0
    assert batch["link_age_mean_s"] >= 7200
    assert await status_command(spec, as_json=False) == 0
    assert "100.0% already expired" in capsys.readouterr().out


@pytest.mark.parametrize("fail_on", [None, '["failed","sources_expired"]'])
async def test_links_expired_before_resolution_are_warned_about_and_can_fail_the_run(
    tmp_path: Path,
    emulator_key: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    fail_on: str | None,
) -> None:
    """Every redirect of the batch expires before the resolver reaches it: the run says so
    loudly, and `fail_on = ["sources_expired"]` turns that into exit 3."""
    config = EmulatorConfig(seed=6, batch_delay_s=0.05, redirect_ttl_s=0.001)
    overrides = [*BATCH] + ([f"job.fail_on={fail_on}"] if fail_on else [])
    with running_emulator(config) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10, overrides=overrides)
        status = await run_command(spec)
    expired = await _rows(
        spec.database_url,
        sa.select(sa.func.count()).where(sources.c.resolve_status == "expired"),
    )
    assert expired[0][0] > 0
    warned = [r for r in caplog.records if getattr(r, "action", None) == "batch_links_expired"]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"
    assert "had expired before they were resolved" in warned[0].getMessage()
    if fail_on is None:
        assert status == 0  # not a failure unless the job says so
    else:
        assert status == 3
        err = capsys.readouterr().err
        assert f"sources_expired {expired[0][0]}" in err
        assert "fail_on_sources_lost = 0.05" in err
