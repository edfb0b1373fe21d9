"""A fleet ends as quietly as it runs: several ``ground run`` processes of one job on one
PostgreSQL each close with their own figures and one grouped count of the job's questions,
``ground load`` leaves the planner statistics of what it loaded, and each process's pool stays
within its bound (pipeline.store.engine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import orjson
import pytest
import sqlalchemy as sa

from pipeline import cli
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.engine import POSTGRES_MAX_CONNECTIONS, create_engine
from tests.support.databases import postgres_database, postgres_job_database
from tests.support.jobs import make_job
from tests.support.paths import REPO

pytestmark = [pytest.mark.postgres]

N_QUESTIONS = 240
N_PROCESSES = 3
# The tables a job-wide status reads besides the questions: none of them is read at the close.
NOT_AT_CLOSE = ("answers", "sources", "calls", "structured", "supports", "citation_verdicts")


async def _no_autovacuum(url: str) -> None:
    """As on a tuned or freshly restored server: only an explicit ANALYZE keeps statistics."""
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                sa.text("ALTER TABLE questions SET (autovacuum_enabled = false)")
            )
    finally:
        await engine.dispose()


def _last_analyzed(url: str) -> tuple[object, float]:
    """When the questions' table was last analyzed, and the rows the planner thinks it has
    (-1: never analyzed, so it plans as if the table were small)."""

    async def read() -> tuple[object, float]:
        engine = create_engine(url)
        try:
            async with engine.connect() as connection:
                row = (
                    await connection.execute(
                        sa.text(
                            "SELECT s.last_analyze, c.reltuples FROM pg_stat_user_tables s"
                            " JOIN pg_class c ON c.oid = s.relid WHERE s.relname = 'questions'"
                        )
                    )
                ).one()
                return row[0], float(row[1])
        finally:
            await engine.dispose()

    return anyio.run(read)


def test_load_analyzes_the_questions_it_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with postgres_job_database() as url:
        make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=50, database=url)
        assert cli.main(["migrate", str(tmp_path / "job.toml")]) == 0
        engine_url = url.replace("postgresql://", "postgresql+asyncpg://")
        anyio.run(_no_autovacuum, engine_url)
        assert _last_analyzed(engine_url) == (None, -1)  # never analyzed (autovacuum is off)
        assert cli.main(["load", str(tmp_path / "job.toml")]) == 0
        first, rows = _last_analyzed(engine_url)
        assert first is not None and rows == 50  # pg_stat_user_tables.last_analyze: the load's
        # Nothing new to load: nothing to analyze again.
        assert cli.main(["load", str(tmp_path / "job.toml")]) == 0
        assert _last_analyzed(engine_url)[0] == first
    assert "loaded 50 new questions" in capsys.readouterr().out


def test_index_analyzes_the_documents_and_chunks_it_wrote(tmp_path: Path) -> None:
    (tmp_path / "docs.jsonl").write_text(
        "".join(
            orjson.dumps({"id": f"d{i}", "title": f"T{i}", "text": f"Airport {i}. " * 20}).decode()
            + "\n"
            for i in range(30)
        ),
        "utf-8",
    )
    (tmp_path / "q.jsonl").write_text('{"id": "1", "question": "x"}\n', "utf-8")
    with postgres_job_database() as url:
        job = tmp_path / "job.toml"
        job.write_text(
            f'[job]\nname = "idx"\ndatabase = "{url}"\n[source]\nfile = "q.jsonl"\n'
            '[retrieval]\ndocs = "docs.jsonl"\nchunk_chars = 120\nchunk_overlap = 0\n',
            "utf-8",
        )
        assert cli.main(["index", str(job)]) == 0
        analyzed = anyio.run(
            _analyzed_tables, url.replace("postgresql://", "postgresql+asyncpg://")
        )
    assert {"documents", "chunks"} <= analyzed


async def _analyzed_tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            names = await connection.scalars(
                sa.text("SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL")
            )
            return set(names)
    finally:
        await engine.dispose()


def _statements(trace: Path) -> list[str]:
    return [orjson.loads(line)["sql"] for line in trace.read_bytes().splitlines()]


def _reads_of_the_job(statement: str) -> bool:
    """A statement that reads a table of the job's results (a job-wide status figure)."""
    words = " ".join(statement.lower().split())
    return words.startswith(("select", "with")) and any(
        f"from {table}" in words or f"join {table}" in words for table in NOT_AT_CLOSE
    )


@pytest.mark.anyio
async def test_each_process_closes_with_its_own_figures_and_one_count(tmp_path: Path) -> None:
    async with postgres_database() as url:
        with running_emulator(EmulatorConfig(seed=41, latency_p50_ms=20, latency_p99_ms=60)) as emu:
            plain_url = url.replace("postgresql+asyncpg://", "postgresql://")
            spec = make_job(
                tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, database=plain_url
            )
            assert await anyio.to_thread.run_sync(cli.main, ["load", str(spec.path)]) == 0
            env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
            children = []
            for i in range(N_PROCESSES):
                command = [
                    *(sys.executable, "-m", "tests.support.traced_run", str(tmp_path / f"{i}.sql")),
                    *("run", str(spec.path), "--summary-json", str(tmp_path / f"{i}.json")),
                ]
                children.append(
                    subprocess.Popen(
                        command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
                    )
                )
            peak = 0
            while any(c.poll() is None for c in children):
                peak = max(peak, await _most_connections_of_one_process(url))
                await anyio.sleep(0.05)
            outputs = [c.communicate() for c in children]
            for child, (_out, err) in zip(children, outputs, strict=True):
                assert child.returncode == 0, err.decode()
            calls = emu.stats()["requests"]["by_kind"].get("developer", 0)
    assert calls == N_QUESTIONS
    assert 0 < peak <= POSTGRES_MAX_CONNECTIONS  # the pool's bound held in every process

    documents = [orjson.loads((tmp_path / f"{i}.json").read_bytes()) for i in range(N_PROCESSES)]
    # Each process's own figures: together they add up to the job, once each.
    assert sum(d["run"]["calls"] for d in documents) == N_QUESTIONS
    assert sum(d["run"]["finished"] for d in documents) == N_QUESTIONS
    for document, (out, _err) in zip(documents, outputs, strict=True):
        status = document["status"]
        assert set(status) == {"job", "total", "terminal", "states", "spend_usd"}
        assert status["total"] == N_QUESTIONS and document["exit_status"] == 0
        text = out.decode()
        assert f"run: {document['run']['finished']} questions finished" in text
        assert f"job test: {N_QUESTIONS} questions" in text

    for i in range(N_PROCESSES):
        closing = _statements(tmp_path / f"{i}.sql")
        counts = [s for s in closing if "group by questions.state" in " ".join(s.lower().split())]
        assert len(counts) == 1, closing  # one grouped count of the job's questions
        assert not [s for s in closing if _reads_of_the_job(s)], closing


async def _most_connections_of_one_process(url: str) -> int:
    """The most connections one ``ground`` process holds on the job's database right now
    (each names itself ``ground:<pid>``: pipeline.store.engine)."""
    name = url.rsplit("/", 1)[1]
    engine = create_engine(url.rsplit("/", 1)[0] + "/postgres")
    try:
        async with engine.connect() as connection:
            most = await connection.scalar(
                sa.text(
                    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM pg_stat_activity"
                    " WHERE datname = :name AND application_name LIKE 'ground:%'"
                    " GROUP BY application_name) AS per"
                ),
                {"name": name},
            )
    finally:
        await engine.dispose()
    return int(most or 0)
