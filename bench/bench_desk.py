"""The review desk (``ground serve``) at scale: server time of the answers list (first page, a
deep page, a filtered deep page), full-text search (a rare word, a word in every row) and one
answer's page, p50 and p95, on SQLite and on PostgreSQL.

The job is generated straight into the database: N questions, each answered with three
resolved sources (SQLite: bench_export's generator, with three supports and a ledger row too;
PostgreSQL: ``generate_series`` on the server). The desk's full-text index follows through
migration 0019's triggers, as it does when a run stores answers. The pages are asked of the
desk's own aiohttp application in this process (a session opened with its token), so a
request's time is the server's plus a loopback round trip.

Targets: list p95 < 200 ms, answer p95 < 100 ms, search p95 < 500 ms.

Usage: ``python bench/bench_desk.py [--answers N] [--backends sqlite,postgresql]
[--repeat R]`` (default 1,000,000 answers on both; PostgreSQL at 127.0.0.1:5432, a database
made for the run and dropped after).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import sqlalchemy as sa
from aiohttp.test_utils import TestClient, TestServer
from bench_export import generate
from scratch import scratch_postgres
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.serve.app import build_app
from pipeline.serve.context import DeskContext
from pipeline.store.engine import create_engine, migrate

POSTGRES_ADMIN = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
PG_ROWS = (
    "INSERT INTO jobs (id, name, created_at) VALUES (1, 'bench', now())",
    "INSERT INTO questions (id, job_id, qid, text, qclass, state, attempts, structure_attempts,"
    " created_at, updated_at) SELECT i, 1, 'q' || lpad(i::text, 7, '0'),"
    " 'Wie viele Einwohner hat Kraków? #' || i, 'geo', 'done', 1, 0, now(), now()"
    " FROM generate_series(1, :n) AS i",
    "INSERT INTO answers (id, question_id, text, grounded, finish_reason, model_version,"
    " response_id, web_search_queries, retrieval_queries, search_entry_point_html,"
    " prompt_tokens, candidates_tokens, tool_use_prompt_tokens, thoughts_tokens, total_tokens,"
    " coverage, warnings, latency_ms, created_at, raw_response)"
    " SELECT i, i, 'Kraków hat etwa 800 000 Einwohner.[1] Die Stadt liegt an der Weichsel.',"
    " true, 'STOP', 'gemini-3.8-flash', 'r' || i, '[\"Kraków Einwohner\"]', '[]', '', 10, 60,"
    " 120, 0, 190, 0.93, '[]', 1800.0, now(), '{}' FROM generate_series(1, :n) AS i",
    "INSERT INTO sources (answer_id, chunk_index, kind, title, uri, domain, destination,"
    " resolve_status, resolve_attempts, resolved_at)"
    " SELECT i, k, 'web', 'source ' || k, 'https://vertexaisearch.cloud.google.com/r/' || i,"
    " 'example.org', 'https://example.org/' || i || '/' || k, 'resolved', 1, now()"
    " FROM generate_series(1, :n) AS i, generate_series(0, 2) AS k",
)


@asynccontextmanager
async def sqlite_job(n: int) -> AsyncIterator[AsyncEngine]:
    with tempfile.TemporaryDirectory(prefix="bench-desk-") as directory:
        db = Path(directory) / "desk.sqlite"
        await anyio.to_thread.run_sync(generate, db, n)
        engine = create_engine(f"sqlite+aiosqlite:///{db}")
        try:
            yield engine
        finally:
            await engine.dispose()


@asynccontextmanager
async def postgres_job(n: int) -> AsyncIterator[AsyncEngine]:
    async with scratch_postgres(POSTGRES_ADMIN, "bench_desk") as engine:
        await migrate(engine)
        async with engine.begin() as connection:
            for statement in PG_ROWS:
                await connection.execute(sa.text(statement), {"n": n})
            await connection.execute(sa.text("ANALYZE"))
        yield engine


def pages(n: int, rng: random.Random) -> dict[str, list[str]]:
    """Each measured kind of request: the paths it asks, one per repeat."""
    return {
        "list, first page": ["/answers"],
        "list, deep page": [f"/answers?after={n - 100}"],
        "list, class + grounded, deep": [f"/answers?class=geo&grounded=yes&after={n // 2}"],
        "search, a rare word": [f"/answers?q={rng.randint(1, n)}" for _ in range(20)],
        "search, a word in every row": ["/answers?q=Einwohner"],
        "one answer": [f"/answers/q{rng.randint(1, n):07d}" for _ in range(20)],
    }


async def measure(engine: AsyncEngine, n: int, repeat: int) -> dict[str, tuple[float, float]]:
    """p50 and p95 in ms of each kind of request."""
    context = DeskContext(
        job_id=1, job_name="bench", model="gemini-3.8-flash", backend="developer", base_url=""
    )
    client = TestClient(TestServer(build_app(engine, context)))
    await client.start_server()
    rng = random.Random(40)
    figures: dict[str, tuple[float, float]] = {}
    try:
        opened = await client.get("/", params={"token": context.access_token})
        assert opened.status == 200, opened.status
        for kind, paths in pages(n, rng).items():
            times = []
            for i in range(repeat):
                path = paths[i % len(paths)]
                started = time.perf_counter()
                response = await client.get(path)
                await response.read()
                times.append((time.perf_counter() - started) * 1000)
                assert response.status == 200, (path, response.status)
            times.sort()
            figures[kind] = (statistics.median(times), times[int(0.95 * (len(times) - 1))])
    finally:
        await client.close()
    return figures


async def bench(n: int, backends: list[str], repeat: int) -> None:
    jobs = {"sqlite": sqlite_job, "postgresql": postgres_job}
    for backend in backends:
        started = time.perf_counter()
        async with jobs[backend](n) as engine:
            made = time.perf_counter() - started
            print(f"{backend}: {n:,} answers generated in {made:.0f} s", flush=True)
            for kind, (p50, p95) in (await measure(engine, n, repeat)).items():
                print(f"  {kind:<30} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=1_000_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--repeat", type=int, default=40, help="requests of each kind")
    args = parser.parse_args()
    anyio.run(bench, args.answers, args.backends.split(","), args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
