"""Batch mode: call 2 as a second batch, the budget held per batch, and a batch whose Google
Search did not run detected."""

from __future__ import annotations

import logging
import warnings
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.results import status_command
from pipeline.commands.run import run_command
from pipeline.costs.charges import worst_case_cost
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.tokens import estimate_tokens
from pipeline.job.calls import request_builder
from pipeline.store.tables import batches, calls, questions, structured
from tests.e2e.test_batch_run import _rows
from tests.support.jobs import make_job
from tests.support.paths import DEMO_SCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("emulator_key")]

BATCH = ['model.mode="batch"', "batch.poll_initial_s=0.02", "batch.poll_max_s=0.2"]
STRUCTURE_ON = ["structure.enabled=true", f'structure.schema="{DEMO_SCHEMA}"']


def _batch_price():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        return load_prices().for_batch("gemini-3.8-flash", "developer")


async def test_call_2_goes_as_a_second_batch(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=21, batch_delay_s=0.05)) as emu:
        overrides = [*BATCH, *STRUCTURE_ON]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=30, overrides=overrides)
        assert await run_command(spec) == 0
        stats = emu.stats()
    assert stats["requests"]["by_kind"].get("developer", 0) == 0  # nothing online
    assert stats["batch"]["batches_created"] == 2
    steps = await _rows(spec.database_url, sa.select(batches.c.step, batches.c.requests))
    (ground, n_ground), (structure, n_structure) = steps
    assert (ground, structure) == ("ground", "structure")
    states = dict(
        await _rows(
            spec.database_url, sa.select(questions.c.state, sa.func.count()).group_by("state")
        )
    )
    assert set(states) <= {"done", "ungrounded"} and n_ground == 30
    assert n_structure == states["done"]  # every grounded answer, and only those
    objects = await _rows(spec.database_url, sa.select(structured.c.valid, structured.c.calls))
    assert len(objects) == n_structure and all(valid and n == 1 for valid, n in objects)
    # The structure calls are in the ledger at batch prices, once each.
    price = _batch_price()
    assert price is not None
    ledger = await _rows(
        spec.database_url,
        sa.select(
            calls.c.question_id, calls.c.cost_micro_usd, calls.c.input_tokens, calls.c.output_tokens
        ).where(calls.c.step == "structure"),
    )
    assert len(ledger) == n_structure == len({q for q, *_ in ledger})
    for _, cost, tokens_in, tokens_out in ledger:
        in_rate, out_rate = price.rates(tokens_in)
        expected = (Decimal(tokens_in) * in_rate + Decimal(tokens_out) * out_rate) / Decimal(
            1_000_000
        )
        assert abs(cost - int(expected * 1_000_000)) <= 1


async def test_an_invalid_output_is_repaired_in_the_next_structure_batch(tmp_path: Path) -> None:
    config = EmulatorConfig(
        seed=42,
        batch_delay_s=0.05,
        ungrounded_share=0.0,
        structured_garbage_share=0.25,
        structured_invalid_share=0.25,
    )
    with running_emulator(config) as emu:
        overrides = [*BATCH, *STRUCTURE_ON]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=40, overrides=overrides)
        assert await run_command(spec) == 3  # finished, some invalid after their repair
        stats = emu.stats()
    assert stats["requests"]["by_kind"].get("developer", 0) == 0  # the repair is a batch too
    rows = await _rows(spec.database_url, sa.select(batches.c.step, batches.c.requests))
    assert [step for step, _ in rows] == ["ground", "structure", "structure"]
    objects = await _rows(spec.database_url, sa.select(structured))
    assert len(objects) == 40  # one object per question: the first invalid output not stored
    repaired = [o for o in objects if o.valid and o.calls == 2]
    invalid = [o for o in objects if not o.valid]
    assert repaired and invalid and all(o.calls == 2 and o.errors for o in invalid)
    assert rows[2][1] == len(repaired) + len(invalid)
    per_question = await _rows(
        spec.database_url,
        sa.select(sa.func.count())
        .select_from(calls)
        .where(calls.c.step == "structure")
        .group_by(calls.c.question_id),
    )
    assert {n for (n,) in per_question} == {1, 2}


async def test_structure_false_keeps_call_2_online(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=22, batch_delay_s=0.05)) as emu:
        overrides = [*BATCH, *STRUCTURE_ON, "batch.structure=false"]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=20, overrides=overrides)
        assert await run_command(spec) == 0
        stats = emu.stats()
    assert stats["batch"]["batches_created"] == 1
    done = await _rows(
        spec.database_url, sa.select(sa.func.count()).where(questions.c.state == "done")
    )
    assert stats["requests"]["by_kind"]["developer"] == done[0][0] > 0


async def test_a_budget_for_half_the_questions_cuts_the_batch_and_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 40
    probe = make_job(tmp_path / "probe", base_url="http://127.0.0.1:1", n_questions=n)
    price = _batch_price()
    assert price is not None
    limits = probe.limits
    body = request_builder(probe).body("What is question number 10 about?")
    worst = worst_case_cost(
        price,
        prompt_tokens_estimate=estimate_tokens(body.decode()),
        max_output_tokens=limits.max_output_tokens,
        max_search_queries=limits.max_search_queries,
        max_tool_use_tokens=limits.max_tool_use_tokens,
        tool="google_search",
    ).micro_usd()
    budget = worst * n // 2 / 1e6
    with running_emulator(EmulatorConfig(seed=23, batch_delay_s=0.05)) as emu:
        overrides = [*BATCH, f"limits.budget_usd={budget}"]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=n, overrides=overrides)
        capsys.readouterr()
        assert await run_command(spec) == 1
        err = capsys.readouterr().err
        stats = emu.stats()
    assert stats["batch"]["batches_created"] == 1
    assert stats["requests"]["by_kind"].get("developer", 0) == 0
    (requests,) = await _rows(spec.database_url, sa.select(batches.c.requests))
    assert n // 2 - 3 <= requests[0] <= n // 2  # what fits, by the worst case
    (message,) = [line for line in err.splitlines() if "budget" in line]  # said once
    assert f"cut to {requests[0]} of {n} questions" in message
    assert f"{n - requests[0]} questions wait for a larger budget_usd" in message
    states = dict(
        await _rows(
            spec.database_url, sa.select(questions.c.state, sa.func.count()).group_by("state")
        )
    )
    assert states.get("pending", 0) == n - requests[0]  # left out untouched, attempts unspent
    spent = await _rows(spec.database_url, sa.select(sa.func.sum(calls.c.cost_micro_usd)))
    assert 0 < spent[0][0] <= budget * 1e6
    # The hold is gone: what is not spent is free again.
    from pipeline.store.tables import budget_holds, shared_limits

    holds = await _rows(spec.database_url, sa.select(budget_holds))
    assert holds == []
    (row,) = await _rows(
        spec.database_url,
        sa.select(shared_limits.c.used, shared_limits.c.reserved).where(
            shared_limits.c.name == "budget"
        ),
    )
    assert row.used == spent[0][0] and row.reserved == 0


async def test_an_all_ungrounded_batch_is_warned_about_and_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    config = EmulatorConfig(seed=24, batch_delay_s=0.05, ungrounded_share=1.0)
    with running_emulator(config) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10, overrides=BATCH)
        with caplog.at_level(logging.WARNING):
            assert await run_command(spec) == 0
    warned = [r for r in caplog.records if getattr(r, "action", None) == "batch_ungrounded"]
    assert len(warned) == 1 and "Google Search may not run in batch" in warned[0].getMessage()
    capsys.readouterr()
    assert await status_command(spec, as_json=True) == 0
    (batch,) = orjson.loads(capsys.readouterr().out)["batches"]
    assert batch["grounded"] == 0 and batch["ungrounded"] == 10
    assert await status_command(spec, as_json=False) == 0
    assert "0 grounded, 10 ungrounded: Google Search did not run" in capsys.readouterr().out


async def test_a_budget_below_one_request_creates_no_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=25, batch_delay_s=0.05)) as emu:
        overrides = [*BATCH, "limits.budget_usd=0.000001"]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10, overrides=overrides)
        capsys.readouterr()
        assert await run_command(spec) == 1
        err = capsys.readouterr().err
        stats = emu.stats()
    assert stats["batch"].get("batches_created", 0) == 0
    assert "no batch created for the 10 questions due" in err
    assert await _rows(spec.database_url, sa.select(batches)) == []
    states = await _rows(spec.database_url, sa.select(questions.c.state, questions.c.attempts))
    assert set(states) == {("pending", 0)}


async def test_retries_online_still_send_call_2_as_one_structure_batch(tmp_path: Path) -> None:
    config = EmulatorConfig(seed=26, batch_delay_s=0.05, batch_failed_row_share=0.3)
    with running_emulator(config) as emu:
        overrides = [*BATCH, *STRUCTURE_ON, 'batch.retries="online"', "limits.max_attempts=6"]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=30, overrides=overrides)
        assert await run_command(spec) in (0, 3)
        stats = emu.stats()
    steps = [s for (s,) in await _rows(spec.database_url, sa.select(batches.c.step))]
    assert steps[0] == "ground" and "ground" not in steps[1:]  # failed rows went online
    assert "structure" in steps
    assert stats["requests"]["by_kind"].get("developer", 0) > 0
    states = {s for (s,) in await _rows(spec.database_url, sa.select(questions.c.state))}
    assert states <= {"done", "ungrounded", "invalid"}
