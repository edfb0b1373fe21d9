"""10,000 questions with non-ASCII text through every export format, and into PostgreSQL.

The rows are written with the store's own persist functions (answers are real emulator
responses, recorded by running a small job first), not through the pipeline: grounding
10,000 questions would take minutes on a small machine, and this is about getting them out.
"""

from __future__ import annotations

import csv
import json
import uuid
from pathlib import Path

import anyio
import orjson
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from pipeline.clock import utcnow
from pipeline.commands.results import ExportOptions, export_command
from pipeline.gemini.wire import decode_response
from pipeline.grounding.mapping import ground_answer
from pipeline.intake.loader import load_questions
from pipeline.job.spec import JobSpec, load_jobspec
from pipeline.job.states import Verdict
from pipeline.rows import AnswerRecord, CallRecord
from pipeline.store import queue
from pipeline.store.answers import persist_answers
from pipeline.store.engine import create_engine, migrate
from pipeline.store.ledger import persist_calls
from pipeline.store.tables import answers, questions, sources
from tests.support.databases import POSTGRES_URL, fetch_rows
from tests.support.exports import as_json
from tests.support.keys import TEST_API_KEY
from tests.support.results import run_results_job

N = 10_000
TEXTS = (
    "Zażółć gęślą jaźń",
    "東京タワーの高さは？",
    '🧑‍🚀 astronaut, "quoted", comma',
    "naïve café\nnewline",
)

pytestmark = pytest.mark.anyio


async def build_large_job(directory: Path, pool: list[bytes]) -> JobSpec:
    """A job of ``N`` questions, every one answered (cycling through ``pool``) and resolved."""
    with (directory / "big.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(N):
            record = {"id": f"id-{i:05d}-ü", "question": f"{TEXTS[i % len(TEXTS)]} #{i}"}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    (directory / "big.toml").write_text(
        '[job]\nname = "big"\ndatabase = "sqlite:///big.sqlite"\n[source]\nfile = "big.jsonl"\n',
        encoding="utf-8",
    )
    spec = load_jobspec(directory / "big.toml")
    parsed = []
    for body in pool:
        response = decode_response(body)
        candidate = response.candidates[0]
        parsed.append((body, response, candidate.finish_reason, ground_answer(candidate)))
    engine = create_engine(spec.database_url)
    try:
        await migrate(engine)
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, spec.name)
        await load_questions(engine, job_id, spec.source_path, spec.source)
        async with engine.connect() as connection:
            ids = [qid for (qid,) in await connection.execute(sa.select(questions.c.id))]
        now = utcnow()
        for start in range(0, len(ids), 1_000):
            chunk = ids[start : start + 1_000]
            records = []
            ledger = []
            for question_id in chunk:
                body, response, finish, answer = parsed[question_id % len(parsed)]
                records.append(AnswerRecord(question_id, answer, response, finish, body, 900.0))
                ledger.append(
                    CallRecord(
                        *(question_id, "ground", "gemini-3.8-flash", now, 900.0, 200, "ok"),
                        input_tokens=100,
                        output_tokens=50,
                        cost_micro_usd=35_000,
                    )
                )
            async with engine.begin() as connection:
                await persist_answers(connection, records, now, lambda _uri: Verdict("pending"))
                await persist_calls(connection, ledger)
                await connection.execute(
                    questions.update().where(questions.c.id.in_(chunk)).values(state="done")
                )
        async with engine.begin() as connection:
            where = "https://exemple.fr/été/" + sa.cast(sources.c.chunk_index, sa.String)
            await connection.execute(
                sources.update().values(
                    destination=where, resolve_status="resolved", resolved_at=now
                )
            )
    finally:
        await engine.dispose()
    return spec


@pytest.fixture(scope="module")
def large_job(tmp_path_factory: pytest.TempPathFactory) -> JobSpec:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMINI_API_KEY", TEST_API_KEY)
        small = anyio.run(run_results_job, tmp_path_factory.mktemp("small"), 12)

    async def responses() -> list[bytes]:
        rows = await fetch_rows(small.database_url, sa.select(answers.c.raw_response))
        return [r.raw_response.encode() for r in rows]

    pool = anyio.run(responses)
    return anyio.run(build_large_job, tmp_path_factory.mktemp("large"), pool)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# A hang guard, not a timing: about 34 s of CPU (the same at 063a243, side by side), past the
# default 120 s beside stress-ng --cpu 8.
@pytest.mark.timeout(400)
async def test_every_format_round_trips_10000_questions(large_job: JobSpec, tmp_path: Path) -> None:
    paths = {fmt: tmp_path / f"all.{fmt}" for fmt in ("jsonl", "csv", "parquet")}
    for fmt, path in paths.items():
        assert await export_command(large_job, ExportOptions(fmt=fmt, out=str(path))) == 0

    records = [orjson.loads(line) for line in paths["jsonl"].read_bytes().splitlines()]
    assert len(records) == N
    assert records[1]["id"] == "id-00001-ü" and records[1]["question"] == f"{TEXTS[1]} #1"
    assert all(r["sources"] and r["citations"] for r in records if r["grounded"])
    assert all(
        s["destination"].startswith("https://exemple.fr/été/") for s in records[0]["sources"]
    )

    with paths["csv"].open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == N
    for row, record in zip(rows, records, strict=True):
        assert row["id"] == record["id"] and row["question"] == record["question"]
        assert row["answer"] == record["answer"]
        assert json.loads(row["sources"]) == record["sources"]
        assert json.loads(row["citations"]) == record["citations"]

    table = pq.read_table(paths["parquet"])
    assert table.num_rows == N
    assert table.column("question").to_pylist() == [r["question"] for r in records]
    for i in (0, 1, 2, 3, N - 1):
        row = as_json(table.slice(i, 1).to_pylist()[0])
        assert row["sources"] == records[i]["sources"]
        assert row["citations"] == records[i]["citations"]


@pytest.mark.postgres
async def test_upsert_into_postgres_twice_keeps_one_row_per_question(large_job: JobSpec) -> None:
    name = f"export_{uuid.uuid4().hex[:10]}"
    target = POSTGRES_URL
    try:
        options = ExportOptions(to=target, table=name)
        assert await export_command(large_job, options) == 0
        # Change some answers, export again: the rows update, none is added.
        engine = create_engine(large_job.database_url)
        try:
            async with engine.begin() as connection:
                first_ten = answers.c.question_id <= 10
                await connection.execute(
                    answers.update().where(first_ten).values(text="nouvelle réponse")
                )
        finally:
            await engine.dispose()
        assert await export_command(large_job, options) == 0
        table = sa.table(name, sa.column("id"), sa.column("answer"), sa.column("sources"))
        count, distinct = (
            await fetch_rows(
                target, sa.select(sa.func.count(), sa.func.count(sa.distinct(table.c.id)))
            )
        )[0]
        assert count == distinct == N
        changed = await fetch_rows(
            target, sa.select(table.c.id).where(table.c.answer == "nouvelle réponse")
        )
        assert len(changed) == 10
        first = (await fetch_rows(target, sa.select(table).where(table.c.id == "id-00000-ü")))[0]
        assert first.sources[0]["destination"].startswith("https://exemple.fr/été/")
    finally:
        engine = create_engine(target)
        try:
            async with engine.begin() as connection:
                await connection.execute(sa.text(f'DROP TABLE IF EXISTS "{name}"'))
        finally:
            await engine.dispose()


async def test_upsert_into_sqlite_twice(large_job: JobSpec, tmp_path: Path) -> None:
    target = f"sqlite:///{tmp_path / 'kb.sqlite'}"
    options = ExportOptions(to=target, table="kb_answers", states=("done",))
    assert await export_command(large_job, options) == 0
    assert await export_command(large_job, options) == 0
    url = f"sqlite+aiosqlite:///{tmp_path / 'kb.sqlite'}"
    table = sa.table("kb_answers", sa.column("id"))
    assert (await fetch_rows(url, sa.select(sa.func.count()).select_from(table)))[0][0] == N
