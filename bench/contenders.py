"""One run of one contender against a running emulator, in a fresh process; prints one JSON line.

Run by ``bench/bench_side_by_side.py`` (a fresh process per run, so peak RSS is the run's own):

    .venv/bin/python bench/contenders.py CONTENDER --base-url URL --questions N
        [--concurrency 64] [--rpm 0]

Contenders:

* ``A``: ``ground run``'s OnlineRunner, call 1 only;
* ``B``: A with the resolver on (redirects resolved to their destinations);
* ``B2``: B with call 2 on (each grounded answer reshaped into ``jobs/demo_schema.json``);
* ``sdk``: a google-genai SDK async loop, ``--concurrency`` tasks, one SQLite commit per answer;
* ``sdk2``: the same making both calls (the grounded one, then the JSON one with the schema);
* ``sdk+aiolimiter``, ``sdk2+aiolimiter``: those paced by ``aiolimiter.AsyncLimiter(rpm / 60,
  1)``: the quota spread evenly over each second (``AsyncLimiter(rpm, 60)`` would let a
  minute's quota through at once);
* ``floor``: a minimal aiohttp + orjson loop storing the answers with batched commits.

``--loop asyncio`` or ``uvloop`` runs the contender on that event loop; by default every
contender runs on the loop ``ground`` chooses (:mod:`pipeline.event_loop`).

Figures: ``cpu_ms_per_q`` (this process's CPU, ``time.process_time``, over the run only),
``rate_per_s``, ``peak_rss_mb`` (``ru_maxrss`` of this process: setup included), ``commits``
and ``claims`` (A and B), ``resolve_p99_s`` (B: answer stored -> destination stored),
``throttled`` (429s seen).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import event_loop
from pipeline.event_loop import EVENT_LOOP_ENV
from tests.support.jobs import QUESTIONS
from tests.support.paths import DEMO_SCHEMA

CONTENDERS = ("A", "B", "B2", "sdk", "sdk2", "sdk+aiolimiter", "sdk2+aiolimiter", "floor")
API_KEY = "emulator-key"
MODEL = "gemini-3.8-flash"
FLOOR_COMMIT_EVERY = 100  # answers per transaction in the floor loop

JOB = """
[job]
name = "bench"
database = "sqlite:///bench.sqlite"
[source]
file = "questions.jsonl"
[model]
name = "{model}"
base_url = "{base_url}"
request_timeout_s = 30.0
[limits]
requests_per_minute = {rpm}
concurrency = {concurrency}
[structure]
enabled = {structure}
schema = "{schema}"
[resolver]
enabled = {resolver}
allow_hosts = ["{host}"]
requests_per_second = 100000.0
concurrency = 64
"""


def question(i: int) -> str:
    return f"{QUESTIONS[i % len(QUESTIONS)]} (#{i})"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


async def run_ours(
    args: argparse.Namespace, directory: Path, resolver: bool, structure: bool
) -> dict[str, Any]:
    import pipeline.online.writer as group_commit
    from pipeline.commands.run import online_runner
    from pipeline.intake.loader import load_questions
    from pipeline.job.calls import plan_calls
    from pipeline.job.spec import load_jobspec
    from pipeline.run.context import run_context
    from pipeline.store import queue
    from pipeline.store.engine import create_engine, migrate
    from tests.support.jobs import write_questions

    write_questions(directory, args.questions)
    host = args.base_url.split("://", 1)[1]
    # Unpaced runs: a quota far above what the emulator serves, as in bench_pipeline.py.
    rpm = args.rpm or 6_000_000
    (directory / "job.toml").write_text(
        JOB.format(
            model=MODEL,
            base_url=args.base_url,
            host=host,
            rpm=rpm,
            concurrency=args.concurrency,
            resolver=str(resolver).lower(),
            structure=str(structure).lower(),
            schema=DEMO_SCHEMA,
        ),
        encoding="utf-8",
    )
    spec = load_jobspec(directory / "job.toml")
    engine = create_engine(spec.database_url)
    counts = {"commits": 0, "claims": 0}
    commit, claim = group_commit.GroupCommitWriter.commit, queue.claim

    async def counted_commit(self: Any, batch: list[Any]) -> None:
        counts["commits"] += 1
        await commit(self, batch)

    async def counted_claim(*a: Any, **k: Any) -> Any:
        counts["claims"] += 1
        return await claim(*a, **k)

    group_commit.GroupCommitWriter.commit = counted_commit  # type: ignore[method-assign]
    queue.claim = counted_claim  # type: ignore[assignment]
    lags: list[float] = []
    try:
        await migrate(engine)
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, spec.name)
        await load_questions(engine, job_id, spec.source_path, spec.source)
        runner = online_runner(spec, run_context(spec, engine, job_id), plan_calls(spec))
        if runner.resolver is not None and args.questions <= 20_000:
            runner.resolver.on_resolved = lags.append  # the lags, kept for the p99 (bench only)
        cpu, wall = time.process_time(), time.perf_counter()
        summary = await runner.run()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        assert summary.calls >= args.questions, summary
    finally:
        await engine.dispose()
    result: dict[str, Any] = {
        "cpu_ms_per_q": cpu / args.questions * 1000.0,
        "rate_per_s": args.questions / wall,
        "throttled": summary.throttled,
        **counts,
    }
    if lags:
        lags.sort()
        result["resolve_p99_s"] = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    return result


def answer_text(body: dict[str, Any]) -> str:
    parts = body.get("candidates", [{}])[0].get("content", {}).get("parts", [])
    return "".join(p.get("text", "") for p in parts)


async def run_sdk(
    args: argparse.Namespace, directory: Path, paced: bool, structure: bool
) -> dict[str, Any]:
    from aiolimiter import AsyncLimiter
    from google import genai
    from google.genai import errors, types

    client = genai.Client(api_key=API_KEY, http_options=types.HttpOptions(base_url=args.base_url))
    grounded = types.GenerateContentConfig(tools=[types.Tool(google_search=types.GoogleSearch())])
    shaped = types.GenerateContentConfig(
        response_mime_type="application/json",
        response_json_schema=orjson.loads(DEMO_SCHEMA.read_bytes()),
        temperature=0.0,
    )
    db = sqlite3.connect(directory / "sdk.sqlite")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE answers (qid TEXT PRIMARY KEY, text TEXT, raw BLOB)")
    db.execute("CREATE TABLE structured (qid TEXT PRIMARY KEY, object TEXT, raw BLOB)")
    limiter = AsyncLimiter(args.rpm / 60, 1) if paced and args.rpm else None
    todo = iter(range(args.questions))
    throttled = 0

    async def call(contents: str, config: types.GenerateContentConfig) -> Any:
        nonlocal throttled
        while True:
            if limiter is not None:
                await limiter.acquire()
            try:
                return await client.aio.models.generate_content(
                    model=MODEL, contents=contents, config=config
                )
            except errors.APIError as exc:
                if exc.code != 429:
                    raise
                throttled += 1
                await asyncio.sleep(1.0)

    async def one_task() -> None:
        for i in todo:
            r = await call(question(i), grounded)
            db.execute(
                "INSERT INTO answers VALUES (?, ?, ?)",
                (f"q{i}", r.text, r.model_dump_json(exclude_none=True)),
            )
            db.commit()
            if structure:
                prompt = f"Fill the schema from this answer alone.\n\n{question(i)}\n\n{r.text}"
                s = await call(prompt, shaped)
                db.execute(
                    "INSERT INTO structured VALUES (?, ?, ?)",
                    (f"q{i}", orjson.dumps(orjson.loads(s.text)).decode(),
                     s.model_dump_json(exclude_none=True)),
                )  # fmt: skip
                db.commit()

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one_task() for _ in range(args.concurrency)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    db.close()
    return {
        "cpu_ms_per_q": cpu / args.questions * 1000.0,
        "rate_per_s": args.questions / wall,
        "throttled": throttled,
    }


async def run_floor(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    import aiohttp

    db = sqlite3.connect(directory / "floor.sqlite")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE answers (qid TEXT PRIMARY KEY, text TEXT, raw BLOB)")
    url = f"{args.base_url}/v1beta/models/{MODEL}:generateContent"
    headers = {"x-goog-api-key": API_KEY, "content-type": "application/json"}
    todo = iter(range(args.questions))
    pending: list[tuple[str, str, bytes]] = []
    commits = 0

    def flush() -> None:
        nonlocal commits
        db.executemany("INSERT INTO answers VALUES (?, ?, ?)", pending)
        db.commit()
        pending.clear()
        commits += 1

    async def one_task(session: aiohttp.ClientSession) -> None:
        for i in todo:
            body = orjson.dumps(
                {
                    "contents": [{"role": "user", "parts": [{"text": question(i)}]}],
                    "tools": [{"googleSearch": {}}],
                }
            )
            async with session.post(url, data=body, headers=headers) as response:
                raw = await response.read()
            pending.append((f"q{i}", answer_text(orjson.loads(raw)), raw))
            if len(pending) >= FLOOR_COMMIT_EVERY:
                flush()

    cpu, wall = time.process_time(), time.perf_counter()
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(one_task(session) for _ in range(args.concurrency)))
    if pending:
        flush()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    db.close()
    return {
        "cpu_ms_per_q": cpu / args.questions * 1000.0,
        "rate_per_s": args.questions / wall,
        "commits": commits,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        os.chdir(directory)  # the job's relative paths
        if args.contender in ("A", "B", "B2"):
            return await run_ours(
                args, directory, resolver=args.contender != "A", structure=args.contender == "B2"
            )
        if args.contender.startswith("sdk"):
            return await run_sdk(
                args,
                directory,
                paced=args.contender.endswith("+aiolimiter"),
                structure=args.contender.startswith("sdk2"),
            )
        if args.contender == "floor":
            return await run_floor(args, directory)
        raise SystemExit(f"unknown contender {args.contender!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("contender", choices=CONTENDERS)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rpm", type=int, default=0, help="the quota to pace at (0: unpaced)")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), help="default: ground's choice")
    args = parser.parse_args()
    os.environ["GEMINI_API_KEY"] = API_KEY
    if args.loop is not None:
        os.environ[EVENT_LOOP_ENV] = args.loop
    result = event_loop.run(run, args)
    result["loop"] = "uvloop" if event_loop.use_uvloop() else "asyncio"
    result["peak_rss_mb"] = peak_rss_mb()
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
