"""Vertex batch prediction end to end on the emulator: the same answers, sources and supports
as an online run of the same questions, at Vertex batch prices; failed rows and an expired job
retried under the normal rules, a cancelled job spending no attempt; what a stored batch left
in Cloud Storage listed by status and removed by `ground batch clean`."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
import sqlalchemy as sa

from pipeline.cli.dispatch import main as ground
from pipeline.commands.batch import batch_cancel_command
from pipeline.commands.maintain import estimate_command
from pipeline.commands.results import status_command
from pipeline.commands.run import run_command
from pipeline.costs.charges import call_cost, worst_case_cost
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.emulator.clock import FakeClock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.storage import StorageClient
from pipeline.gemini.tokens import estimate_tokens
from pipeline.gemini.vertex_batch_wire import parse_gs_uri
from pipeline.gemini.wire import decode_response
from pipeline.job.calls import request_builder
from pipeline.job.spec import JobSpecError
from pipeline.limits.backoff import Backoff
from pipeline.store.tables import (
    answers,
    batches,
    budget_holds,
    calls,
    questions,
    sources,
    supports,
)
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job
from tests.support.ledger import assert_paid_once
from tests.support.vertex import GCS_INPUT, GCS_OUTPUT, VERTEX, service_account_file, vertex_batch
from tests.support.waiting import wait_until

pytestmark = pytest.mark.anyio

MODEL = "gemini-3.8-flash"


class _Bearer:
    """A static Vertex token (the emulator accepts its configured bearer_tokens)."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}


@pytest.fixture
def vertex_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    def install(token_uri: str) -> None:
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(service_account_file(tmp_path, token_uri))
        )
        monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)

    return install


async def _stored(url: str) -> tuple[list[Any], list[Any], list[Any]]:
    """Each question's answer, sources and supports, by question id (not by row id)."""
    by_question = sa.select(questions.c.qid).join(answers, answers.c.question_id == questions.c.id)
    a = answers.c
    stored_answers = await fetch_rows(
        url,
        by_question.add_columns(
            a.text,
            a.grounded,
            a.finish_reason,
            a.model_version,
            a.web_search_queries,
            a.retrieval_queries,
            a.search_entry_point_html,
            a.prompt_tokens,
            a.candidates_tokens,
            a.total_tokens,
            a.coverage,
            a.warnings,
        ).order_by(questions.c.qid),
    )
    s = sources.c
    stored_sources = await fetch_rows(
        url,
        by_question.join(sources, s.answer_id == a.id)
        .add_columns(s.chunk_index, s.kind, s.title, s.domain, s.destination, s.resolve_status)
        .order_by(questions.c.qid, s.chunk_index),
    )
    p = supports.c
    stored_supports = await fetch_rows(
        url,
        by_question.join(supports, p.answer_id == a.id)
        .add_columns(
            p.ordinal,
            p.part_index,
            p.byte_start,
            p.byte_end,
            p.char_start,
            p.char_end,
            p.text,
            p.chunk_indices,
        )
        .order_by(questions.c.qid, p.ordinal),
    )
    return (
        [tuple(r) for r in stored_answers],
        [tuple(r) for r in stored_sources],
        [tuple(r) for r in stored_supports],
    )


def _vertex_batch_price() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        return load_prices().for_batch(MODEL, "vertex")


async def _attempts_and_calls(url: str) -> tuple[int, int, int]:
    """Attempts spent (summed over the questions), the most any question spent, and the
    ledger's rows."""
    ((spent, most),) = await fetch_rows(
        url, sa.select(sa.func.sum(questions.c.attempts), sa.func.max(questions.c.attempts))
    )
    (n_calls,) = (await fetch_rows(url, sa.select(sa.func.count()).select_from(calls)))[0]
    return int(spent), int(most), int(n_calls)


async def _finished(url: str) -> dict[str, int]:
    rows = await fetch_rows(
        url, sa.select(questions.c.state, sa.func.count()).group_by(questions.c.state)
    )
    return dict(rows)


async def test_a_vertex_batch_run_stores_what_an_online_run_stores(
    tmp_path: Path, vertex_credentials: Callable[[str], None]
) -> None:
    n = 24
    with running_emulator(EmulatorConfig(seed=5, batch_delay_s=0.2)) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        batch = make_job(
            tmp_path / "batch",
            base_url=emu.base_url,
            n_questions=n,
            overrides=vertex_batch(emu.base_url),
        )
        assert await run_command(batch) == 0
        stats = emu.stats()
        ((row),) = await fetch_rows(batch.database_url, sa.select(batches))
        where = parse_gs_uri(row.input_uri)
        async with StorageClient(_Bearer(emu.bearer_token), endpoint=emu.base_url) as storage:
            uploaded = await storage.stat(where.bucket, where.name)
        online = make_job(
            tmp_path / "online", base_url=emu.base_url, n_questions=n, overrides=VERTEX
        )
        assert await run_command(online) == 0
    # One prediction job over one uploaded file, and not a single online call.
    assert stats["prediction"]["prediction_jobs_created"] == 1
    assert stats["prediction"]["prediction_requests"] == n
    assert stats["storage"]["objects_uploaded"] == 1
    assert stats["requests"]["by_kind"].get("vertex", 0) == 0
    assert set(await _finished(batch.database_url)) <= {"done", "ungrounded"}
    # The answers, their sources (destinations resolved) and supports, exactly as online.
    assert await _stored(batch.database_url) == await _stored(online.database_url)
    await assert_paid_once(batch.database_url, n)
    # Each ledger row at the Vertex batch price.
    price = _vertex_batch_price()
    assert price is not None
    rows = await fetch_rows(
        batch.database_url,
        sa.select(calls.c.cost_micro_usd, answers.c.raw_response).join(
            answers, answers.c.question_id == calls.c.question_id
        ),
    )
    assert len(rows) == n
    for cost, raw in rows:
        response = decode_response(raw.encode())
        grounding = response.candidates[0].grounding_metadata
        assert cost == call_cost(price, response.usage_metadata, grounding).micro_usd()
    # Where its files went, for a resumed run and for `ground batch clean`.
    assert row.state == "JOB_STATE_SUCCEEDED" and row.phase == "done"
    assert row.input_uri == f"{GCS_INPUT}/{row.display_name}.jsonl"
    assert uploaded is not None and row.input_md5 == uploaded.md5_hash
    assert row.file_name is None
    assert row.output_uri_prefix == f"{GCS_OUTPUT}/{row.display_name}"
    assert row.output_dir.startswith(f"{row.output_uri_prefix}/prediction-model-")


async def test_estimate_prices_vertex_batch_mode_at_vertex_batch_rates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = "http://127.0.0.1:1"
    batch = make_job(
        tmp_path / "batch", base_url=base, n_questions=10, overrides=vertex_batch(base)
    )
    assert await estimate_command(batch) == 0
    batch_out = capsys.readouterr().out
    assert f"{MODEL} [batch]" in batch_out
    online = make_job(tmp_path / "online", base_url=base, n_questions=10, overrides=VERTEX)
    assert await estimate_command(online) == 0
    online_out = capsys.readouterr().out

    def expected(out: str) -> float:
        line = next(x for x in out.splitlines() if x.startswith("expected: $"))
        return float(line.split("$")[1].split(" ")[0])

    assert 0 < expected(batch_out) < expected(online_out)


async def test_failed_rows_and_an_expired_job_go_back_under_the_retry_rules(
    tmp_path: Path, vertex_credentials: Callable[[str], None]
) -> None:
    n = 30
    config = EmulatorConfig(
        seed=8, batch_delay_s=0.05, batch_failed_row_share=0.3, batch_expire_first=1
    )
    with running_emulator(config) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        # A row fails with probability 0.3 in each job it is in: 11 attempts after the expired
        # job's leave 30 x 0.3^11 = 5e-5 a run for a question to fail them all.
        overrides = [*vertex_batch(emu.base_url), "limits.max_attempts=12"]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=n, overrides=overrides)
        assert await run_command(spec, backoff=Backoff(cap_s=0.2)) == 0
        stats = emu.stats()["prediction"]
    assert stats["prediction_jobs_ended_expired"] == 1
    assert stats["prediction_jobs_created"] >= 3  # the expired job, then retries
    rows = await fetch_rows(spec.database_url, sa.select(batches).order_by(batches.c.id))
    expired = rows[0]
    assert expired.state == "JOB_STATE_EXPIRED"
    # The expired job exported half its rows: stored (answers or failed rows); the other half
    # went back to the queue.
    assert expired.answered + expired.failed_rows == n // 2 and expired.answered > 0
    assert expired.returned == n // 2
    assert sum(r.failed_rows for r in rows) > 0
    assert set(await _finished(spec.database_url)) <= {"done", "ungrounded"}
    # Every line (answered or failed) spent an attempt and left a ledger row; each question
    # the expired job gave back spent one more, with no ledger row (nothing was billed).
    spent, _, n_calls = await _attempts_and_calls(spec.database_url)
    assert spent == n_calls + expired.returned
    await assert_paid_once(spec.database_url, n)


async def test_a_failed_job_gives_every_question_back_under_the_retry_rules(
    tmp_path: Path, vertex_credentials: Callable[[str], None]
) -> None:
    """The input object vanishes between its upload and the job's create: Vertex fails the
    job; its questions go back (an attempt spent) and the next job answers them."""
    n = 6
    with running_emulator(EmulatorConfig(seed=10, batch_delay_s=0.05)) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=n, overrides=vertex_batch(emu.base_url)
        )
        emu.hold_vertex_batch("upload")  # stored, its answer not yet sent
        run = asyncio.create_task(run_command(spec, backoff=Backoff(cap_s=0.2)))
        await anyio.to_thread.run_sync(
            wait_until,
            lambda: emu.stats()["storage"].get("held_upload", 0) >= 1,
            "the run uploading its input",
        )
        async with StorageClient(_Bearer(emu.bearer_token), endpoint=emu.base_url) as storage:
            (stored,) = [o async for o in storage.list("ground-test", "in/")]
            assert await storage.delete(stored.bucket, stored.name)
        emu.release_vertex_batch("upload")
        assert await run == 0
        stats = emu.stats()["prediction"]
    assert stats["prediction_jobs_created"] >= 2  # the failed job, then its retry
    failed, *later = await fetch_rows(spec.database_url, sa.select(batches).order_by(batches.c.id))
    assert failed.state == "JOB_STATE_FAILED" and failed.last_error
    assert failed.answered == failed.failed_rows == 0 and failed.returned == n
    assert later and all(r.state == "JOB_STATE_SUCCEEDED" for r in later)
    assert set(await _finished(spec.database_url)) <= {"done", "ungrounded"}
    spent, most, n_calls = await _attempts_and_calls(spec.database_url)
    assert spent == n_calls + n and most == 2  # the failed job's attempt, then the answer
    await assert_paid_once(spec.database_url, n)


async def test_a_cancelled_job_stores_its_completed_rows_and_spends_no_attempt(
    tmp_path: Path, vertex_credentials: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    n = 10
    clock = FakeClock()
    # Jobs take 20 minutes of the emulator's clock: well within its tokens' hour.
    with running_emulator(EmulatorConfig(seed=3, batch_delay_s=1200.0), clock=clock) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=n, overrides=vertex_batch(emu.base_url)
        )
        assert await run_command(spec, no_wait=True) == 0
        ((row),) = await fetch_rows(spec.database_url, sa.select(batches))
        clock.advance(900)  # halfway through its running time: half the rows are done
        capsys.readouterr()
        assert await batch_cancel_command(spec) == 0
        assert f"cancel requested: {row.name}" in capsys.readouterr().out
        run = asyncio.create_task(run_command(spec, backoff=Backoff(cap_s=0.2)))
        await anyio.to_thread.run_sync(
            wait_until,
            lambda: emu.stats()["prediction"]["prediction_jobs_created"] == 2,
            "the run created a second prediction job",
        )
        clock.advance(1200)
        assert await run == 0
    first, second = await fetch_rows(spec.database_url, sa.select(batches).order_by(batches.c.id))
    assert first.state == "JOB_STATE_CANCELLED" and second.state == "JOB_STATE_SUCCEEDED"
    assert first.answered == n // 2 and first.returned == n // 2  # the rows done were exported
    assert second.requests == n // 2
    assert set(await _finished(spec.database_url)) <= {"done", "ungrounded"}
    # One attempt each: the cancel spent none on the questions it gave back.
    spent, most, n_calls = await _attempts_and_calls(spec.database_url)
    assert spent == n_calls == n and most == 1
    await assert_paid_once(spec.database_url, n)


async def test_a_budget_for_half_the_questions_holds_and_cuts_at_vertex_batch_prices(
    tmp_path: Path, vertex_credentials: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    n = 20
    probe = make_job(
        tmp_path / "probe", base_url="http://127.0.0.1:1", overrides=vertex_batch("http://x")
    )
    price = _vertex_batch_price()
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
    with running_emulator(EmulatorConfig(seed=9, batch_delay_s=0.05)) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        overrides = [*vertex_batch(emu.base_url), f"limits.budget_usd={budget}"]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=n, overrides=overrides)
        capsys.readouterr()
        assert await run_command(spec) == 1
        err = capsys.readouterr().err
        stats = emu.stats()["prediction"]
    assert stats["prediction_jobs_created"] == 1
    ((requests,),) = await fetch_rows(spec.database_url, sa.select(batches.c.requests))
    assert n // 2 - 2 <= requests <= n // 2  # what fits, by the worst case at this price
    assert f"cut to {requests} of {n} questions" in err
    ((spent,),) = await fetch_rows(
        spec.database_url, sa.select(sa.func.sum(calls.c.cost_micro_usd))
    )
    assert 0 < spent <= budget * 1e6
    assert await fetch_rows(spec.database_url, sa.select(budget_holds)) == []  # released


async def _status(spec: Any, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert await status_command(spec, as_json=True) == 0
    return orjson.loads(capsys.readouterr().out)


def _ground(spec: Any, overrides: list[str], *args: str) -> int:
    """``ground ARGS JOB --set ...`` in this process (the CLI's own dispatch)."""
    sets = [a for o in overrides for a in ("--set", o)]
    return ground([*args, str(spec.path), *sets])


async def test_status_lists_what_stored_batches_left_and_batch_clean_removes_it(
    tmp_path: Path, vertex_credentials: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    with running_emulator(EmulatorConfig(seed=4, batch_delay_s=60.0), clock=clock) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        overrides = vertex_batch(emu.base_url)
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=5, overrides=overrides)
        assert await run_command(spec, no_wait=True) == 0
        # A batch still running is not listed, and not touched.
        (batch,) = (await _status(spec, capsys))["batches"]
        assert batch["left_in_bucket"] == []
        assert await anyio.to_thread.run_sync(_ground, spec, overrides, "batch", "clean") == 0
        assert "nothing to clean" in capsys.readouterr().out
        assert emu.stats()["storage"]["objects"] == 1  # the input
        clock.advance(60)
        # The job has ended at Google, not yet here: a cancel is refused, and said so.
        capsys.readouterr()
        assert await batch_cancel_command(spec) == 1
        assert "not cancelled" in capsys.readouterr().err
        assert await run_command(spec) == 0
        ((row),) = await fetch_rows(spec.database_url, sa.select(batches))
        (batch,) = (await _status(spec, capsys))["batches"]
        assert batch["left_in_bucket"] == [row.input_uri, f"{row.output_dir}/"]
        assert await status_command(spec, as_json=False) == 0
        text = capsys.readouterr().out
        assert "ground batch clean" in text and f"  {row.output_dir}/" in text
        assert emu.stats()["storage"]["objects"] == 2  # the input and predictions.jsonl
        assert await anyio.to_thread.run_sync(_ground, spec, overrides, "batch", "clean") == 0
        assert "cleaned 1 batch: 2 objects removed" in capsys.readouterr().out
        storage = emu.stats()["storage"]
        assert storage["objects"] == 0 and storage["objects_deleted"] == 2
        ((row),) = await fetch_rows(spec.database_url, sa.select(batches))
        assert row.cleaned_at is not None
        (batch,) = (await _status(spec, capsys))["batches"]
        assert batch["left_in_bucket"] == []
        assert await anyio.to_thread.run_sync(_ground, spec, overrides, "batch", "clean") == 0
        assert "nothing to clean" in capsys.readouterr().out
    # The questions and their answers stay: only the bucket's copies went.
    assert set(await _finished(spec.database_url)) <= {"done", "ungrounded"}
    await assert_paid_once(spec.database_url, 5)


@pytest.mark.parametrize("missing", ["gcs_input", "gcs_output"])
def test_vertex_batch_mode_needs_both_buckets_at_load(tmp_path: Path, missing: str) -> None:
    overrides = [o for o in vertex_batch("http://127.0.0.1:1") if f"batch.{missing}=" not in o]
    with pytest.raises(JobSpecError, match=rf"batch\.{missing}: required for Vertex batch") as info:
        make_job(tmp_path, base_url="http://127.0.0.1:1", overrides=overrides)
    assert "\n" not in str(info.value)
