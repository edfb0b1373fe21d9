"""One definition of a *verified* answer: the SQL that ``ground status``, the report and
``ground verify`` count with (:func:`pipeline.store.citation_verdicts.answer_counts`) agrees
with :func:`pipeline.verify.precision.answer_verified`, which ``export --verified`` keeps by,
on every kind of answer; and the looser notion has its own name."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.commands.verify import render_fractions, render_verified
from pipeline.results.precision import figures_from
from pipeline.rows import CallRecord, Pair, PairVerdict
from pipeline.store import citation_verdicts as store
from pipeline.store.tables import answers, jobs, questions
from pipeline.verify.precision import answer_verified
from tests.support.databases import sqlite_engine

pytestmark = pytest.mark.anyio
NOW = dt.datetime(2026, 12, 3, tzinfo=dt.UTC)
MODEL = "gemini-x"

# (claim, verdict) pairs of one answer each.
CASES: dict[str, list[tuple[int, str]]] = {
    "all_supported": [(0, "supported"), (1, "supported")],
    "one_claim_mixed": [(0, "supported"), (0, "not_supported"), (1, "supported")],
    "partly": [(0, "supported"), (1, "partly")],
    "unreadable_beside": [(0, "supported"), (1, "unreadable")],
    "nothing_readable": [(0, "unreadable"), (1, "no_verdict")],
    "contradicted": [(0, "contradicted")],
}


async def _one(connection: AsyncConnection, statement: sa.Insert) -> int:
    key = (await connection.execute(statement)).inserted_primary_key
    assert key is not None
    return int(key[0])


async def _answer(connection: AsyncConnection, job: int, name: str) -> tuple[int, int]:
    question = await _one(
        connection,
        questions.insert().values(
            job_id=job,
            qid=name,
            text="Q?",
            qclass=name,
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
            text="A.",
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
    return question, answer


async def test_the_counted_and_the_exported_verified_are_one(tmp_path: Path) -> None:
    async with sqlite_engine(tmp_path) as engine, engine.begin() as connection:
        job = await _one(connection, jobs.insert().values(name="j", created_at=NOW))
        for name, pairs in CASES.items():
            question, answer = await _answer(connection, job, name)
            verdicts = [
                PairVerdict(Pair(claim, f"u{i}", f"https://{i}.example/"), verdict, None, None)
                for i, (claim, verdict) in enumerate(pairs)
            ]
            record = CallRecord(question, "verify", MODEL, NOW, 5.0, 200, "ok")
            await store.store_checked(
                connection,
                answer_id=answer,
                question_id=question,
                model=MODEL,
                record=record,
                verdicts=verdicts,
                now=NOW,
            )
        counted = await store.answer_counts(connection, job, MODEL)
    for name, pairs in CASES.items():
        expected = answer_verified(v for _, v in pairs)
        assert counted[name] == (1, int(expected)), name
    assert {n for n, (_, held) in counted.items() if held} == {
        "all_supported",
        "unreadable_beside",
    }


def test_verify_prints_the_counted_figure_and_names_the_looser_one_apart() -> None:
    found = figures_from("m", {"": {"supported": 3, "not_supported": 1}}, {"": (4, 1)})
    assert render_verified(found).startswith("verified answers: 1 of 4 checked")
    assert render_verified(None) == "verified answers: none checked"
    looser = render_fractions({1: 1.0, 2: 1.0, 3: 0.5, 4: None})
    assert looser.startswith("claim-backed answers: 2 of 3 sampled")
    assert "verified answers" not in looser
