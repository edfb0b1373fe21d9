"""Citation verdicts stored and read back, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.rows import CallRecord, Pair, PairVerdict
from pipeline.store import citation_verdicts as store
from pipeline.store.tables import answers, calls, jobs, questions, sources, supports
from tests.support.databases import postgres_engine, sqlite_engine

pytestmark = pytest.mark.anyio
NOW = dt.datetime(2026, 12, 3, tzinfo=dt.UTC)


@asynccontextmanager
async def _engine(kind: str, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if kind == "sqlite":
        async with sqlite_engine(tmp_path) as engine:
            yield engine
    else:
        async with postgres_engine() as engine:
            yield engine


async def _one(connection: AsyncConnection, statement: sa.Insert) -> int:
    return int((await connection.execute(statement)).inserted_primary_key[0])


async def _answer(connection: AsyncConnection) -> tuple[int, int, int]:
    job = await _one(connection, jobs.insert().values(name="j", created_at=NOW))
    question = await _one(
        connection,
        questions.insert().values(
            job_id=job,
            qid="q1",
            text="Q?",
            qclass="geo",
            state="done",
            attempts=1,
            structure_attempts=0,
            created_at=NOW,
            updated_at=NOW,
        ),
    )
    answer = await _one(
        connection,
        answers.insert().values(
            question_id=question,
            text="A tall tower.",
            grounded=True,
            web_search_queries=[],
            retrieval_queries=[],
            prompt_tokens=1,
            candidates_tokens=1,
            tool_use_prompt_tokens=0,
            thoughts_tokens=0,
            total_tokens=2,
            coverage=1.0,
            warnings=[],
            latency_ms=1.0,
            created_at=NOW,
            raw_response="{}",
        ),
    )
    await connection.execute(
        sources.insert().values(
            answer_id=answer,
            chunk_index=0,
            kind="web",
            uri="u",
            destination="https://a.example/",
            resolve_status="resolved",
            resolve_attempts=1,
        )
    )
    await connection.execute(
        supports.insert().values(
            answer_id=answer,
            ordinal=0,
            part_index=0,
            byte_start=0,
            byte_end=13,
            char_start=0,
            char_end=13,
            text="A tall tower.",
            chunk_indices=[0],
        )
    )
    return job, question, answer


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_verdicts_round_trip_with_their_ledger_row(kind: str, tmp_path: Path) -> None:
    async with _engine(kind, tmp_path) as engine, engine.begin() as connection:
        job, question, answer = await _answer(connection)
        (ref,) = await store.answers_to_check(connection, job)
        assert (ref.answer_id, ref.qid, ref.qclass) == (answer, "q1", "geo")
        parts = await store.answer_parts(connection, [answer])
        assert parts[answer][0][0].chunk_indices == (0,)
        assert parts[answer][1][0].destination == "https://a.example/"
        record = CallRecord(question, "verify", "gemini-x", NOW, 5.0, 200, "ok", cost_micro_usd=7)
        pair = Pair(0, "u1", "https://a.example/", url="https://a.example/")
        verdict = PairVerdict(pair, "supported", "tall", "URL_RETRIEVAL_STATUS_SUCCESS")
        call_id = await store.store_call(connection, record)
        await store.store_verdicts(
            connection,
            answer_id=answer,
            question_id=question,
            model="gemini-x",
            call_id=call_id,
            verdicts=[verdict],
            now=NOW,
        )
        # the same pair again (a rerun): kept as it was
        again = await store.store_call(connection, record)
        await store.store_verdicts(
            connection,
            answer_id=answer,
            question_id=question,
            model="gemini-x",
            call_id=again,
            verdicts=[PairVerdict(pair, "not_supported", None, None, "a reason")],
            now=NOW,
        )
        assert await store.checked_answers(connection, [answer], "gemini-x") == {answer}
        assert await store.checked_answers(connection, [answer], "other") == set()
        (stored,) = await store.read_verdicts(connection, [answer])
        assert (stored.verdict, stored.quote, stored.call_id) == ("supported", "tall", call_id)
        steps = (await connection.execute(sa.select(calls.c.step, calls.c.cost_micro_usd))).all()
        assert [tuple(r) for r in steps] == [("verify", 7), ("verify", 7)]
