"""The queue at scale and the scale-out mode, against the real PostgreSQL (not a test).

1. Load ``--rows`` questions into a fresh PostgreSQL database with the product's loader:
   wall time and peak RSS (the target: 1 M rows in under 2 minutes).
2. Claim latency with ``--rows`` rows at 1 % and at 99 % done (the partial index: the ratio
   should be about 1).
3. Claims/s and completions/s against PostgreSQL (a claim of 100 + their completion, in a loop).
4. ``ground worker --processes 2`` against one process on a resolution-heavy job, the
   emulator in a child process at 0 latency: questions/min and CPU/question side by side.

    .venv/bin/python bench/bench_scaleout.py [--rows 1000000] [--questions 3000] [--load-only]

Step 1 uses :func:`pipeline.intake.loader.load_questions` (validated, then committed per
chunk) and then loads the unchanged file again, which the fingerprint skips.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.demo import emulator_process
from pipeline.intake.loader import load_questions
from pipeline.job.sections import SourceSection
from pipeline.job.states import QuestionState
from pipeline.rows import StateChange
from pipeline.store import queue
from pipeline.store.engine import create_engine, migrate
from pipeline.store.tables import questions
from tests.support.databases import POSTGRES_URL
from tests.support.jobs import write_questions

LEASE = dt.timedelta(minutes=5)


async def fresh_database() -> str:
    name = f"bench_scaleout_{uuid.uuid4().hex[:8]}"
    admin = sa.ext.asyncio.create_async_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    async with admin.connect() as connection:
        await connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    await admin.dispose()
    return POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"


async def drop_database(url: str) -> None:
    admin = sa.ext.asyncio.create_async_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    async with admin.connect() as connection:
        await connection.execute(
            sa.text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
        )
    await admin.dispose()


async def claim_ms(engine: AsyncEngine, job: int) -> str:
    """The median of 20 claims of 100 (each rolled back), in ms."""
    times = []
    for _ in range(20):
        connection = await engine.connect()
        transaction = await connection.begin()
        t = time.perf_counter()
        await queue.claim(connection, job, "bench", 100, LEASE)
        times.append((time.perf_counter() - t) * 1000)
        await transaction.rollback()
        await connection.close()
    return f"median {statistics.median(times):.2f} ms"


async def vacuum(engine: AsyncEngine) -> None:
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with autocommit.connect() as connection:
        await connection.execute(sa.text("VACUUM ANALYZE questions"))


async def bench_queue(rows: int, directory: Path, *, load_only: bool = False) -> None:
    path = write_questions(directory, rows)
    url = await fresh_database()
    engine = create_engine(url)
    try:
        await migrate(engine)
        async with engine.begin() as connection:
            job = await queue.ensure_job(connection, "bench")
        source = SourceSection(file=str(path))
        started = time.perf_counter()
        # The product's load: validated first, then committed per chunk.
        result = await load_questions(engine, job, path, source)
        load_s = time.perf_counter() - started
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"load: {result.added} rows in {load_s:.1f} s, peak RSS {rss_mb:.0f} MB")
        started = time.perf_counter()
        again = await load_questions(engine, job, path, source)
        print(
            f"load again, file unchanged: skipped={again.skipped} ({again.existing} rows)"
            f" in {time.perf_counter() - started:.2f} s"
        )
        if load_only:
            return
        async with engine.begin() as connection:
            await connection.execute(sa.text("ANALYZE questions"))

        for done_share in (0.01, 0.99):
            cut = int(rows * done_share)
            async with engine.begin() as connection:
                await connection.execute(
                    questions.update().where(questions.c.id <= cut).values(state=QuestionState.DONE)
                )
                await connection.execute(
                    questions.update()
                    .where(questions.c.id > cut)
                    .values(state=QuestionState.PENDING)
                )
                await connection.execute(sa.text("ANALYZE questions"))
            # Right after the bulk update its dead row versions are still indexed; in a run,
            # rows finish gradually and autovacuum removes them (here: VACUUM, as it would).
            print(f"claim of 100 at {done_share:.0%} done: {await claim_ms(engine, job)}")
            await vacuum(engine)
            print(f"claim of 100 at {done_share:.0%} done, vacuumed: {await claim_ms(engine, job)}")

        # Claims and completions per second: claim 100, complete them, repeat.
        claimed = completed = 0
        started = time.perf_counter()
        while time.perf_counter() - started < 10:
            async with engine.begin() as connection:
                batch = await queue.claim(connection, job, "bench", 100, LEASE)
            claimed += len(batch)
            async with engine.begin() as connection:
                await queue.apply_state_changes(
                    connection,
                    [StateChange(q.id, QuestionState.DONE, q.attempts + 1) for q in batch],
                )
            completed += len(batch)
            if not batch:
                break
        elapsed = time.perf_counter() - started
        print(
            f"claims {claimed / elapsed:.0f}/s and completions {completed / elapsed:.0f}/s"
            " (one process, batches of 100)"
        )
    finally:
        await engine.dispose()
        await drop_database(url)


JOB = """
[job]
name = "bench"
database = "{database}"
[source]
file = "questions.jsonl"
[model]
base_url = "{base_url}"
[limits]
requests_per_minute = 600000
concurrency = 64
[resolver]
allow_hosts = ["{host}"]
requests_per_second = 100000.0
concurrency = 64
"""


async def bench_processes(n: int, directory: Path) -> None:
    with emulator_process(realistic_latency=False) as base_url:
        host = base_url.split("://", 1)[1]
        for processes in (1, 2, 1, 2):
            run_dir = directory / f"p{processes}-{uuid.uuid4().hex[:4]}"
            run_dir.mkdir()
            write_questions(run_dir, n)
            url = await fresh_database()
            job = run_dir / "job.toml"
            job.write_text(
                JOB.format(database=url.replace("+asyncpg", ""), base_url=base_url, host=host),
                encoding="utf-8",
            )
            env = {**os.environ, "GEMINI_API_KEY": "emulator-key"}
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(  # noqa: ASYNC221 (timed whole: nothing else runs meanwhile)
                [
                    sys.executable,
                    "-m",
                    "pipeline.cli",
                    "worker",
                    str(job),
                    "--processes",
                    str(processes),
                ],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            print(
                f"--processes {processes}: {n / wall * 60:,.0f} questions/min,"
                f" {cpu / n * 1000:.2f} ms CPU/question (all processes, start-up included)"
            )
            await drop_database(url)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--questions", type=int, default=3_000)
    parser.add_argument("--load-only", action="store_true", help="step 1 only: the load")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        await bench_queue(args.rows, Path(tmp), load_only=args.load_only)
        if not args.load_only:
            await bench_processes(args.questions, Path(tmp))


if __name__ == "__main__":
    anyio.run(main)
