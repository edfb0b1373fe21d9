"""A fleet of real ``ground run`` processes on one PostgreSQL, from the first send to the last
exit (not a test).

Per size (``--sizes``, default 8, 16, 32 and 48 processes): a scratch database on the server
(bench/scratch.py), migrated, with autovacuum off on every table of the job (as on a tuned or
freshly restored server, where only an explicit ``ANALYZE`` gives the planner its statistics),
``--questions`` questions loaded once with ``ground load``, then N separate ``ground run``
processes of that job started together against the emulator (its own process, enforcing a
``--rpm`` quota in a sliding minute, lognormal latency p50 400 ms / p99 2 s), the job's
``requests_per_minute`` the same quota. Reported, from the job's ledger (each call's
``started_at``) and the emulator's counters:

* **quota use**: the sends over the sending span (first send to last send) against the quota;
* **429s**: the emulator's quota rejections (the target: 0);
* **most sends in a window**: the most calls started in any ``quota_window_s`` (60 s) window,
  beside the quota (never above it);
* **tail**: from the last send to the last process's exit (the target: under 15 s at 48
  processes; the close of every process, ending at the same moment, is in it);
* the most connections any one process held at once (the pool's bound is 5), and all of them.

By default the server is a throw-away cluster of the installed PostgreSQL
(bench_quota_scale's), its ``max_connections`` sized to the largest fleet (5 a process and
some), stopped at the end: the shared test server's 100 do not hold 48 processes at their
pools' bound. ``--postgres-url [URL]`` uses a running server instead (the shared one when no
URL is given).

    .venv/bin/python bench/bench_fleet.py                                      # 8..48, ~20 min
    .venv/bin/python bench/bench_fleet.py --postgres-url --sizes 8,16 --questions 1500 --rpm 1800

``--out`` (default ``BENCHMARKS.md``) gets the markdown section (bench/sections.py);
``--out -`` prints it instead.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson
import sqlalchemy as sa
from scratch import scratch_postgres
from sections import splice
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.store.engine import POSTGRES_MAX_CONNECTIONS, migrate
from pipeline.store.tables import calls
from tests.support.databases import POSTGRES_URL
from tests.support.jobs import write_questions

REPO = Path(__file__).resolve().parent.parent
WINDOW_S = 60.0  # the emulator's quota window (quota_window_s)
TAIL_TARGET_S = 15.0
_LISTENING = re.compile(r"listening on (http://\S+)")

JOB = """
[job]
name = "fleet"
database = "{database}"
[source]
file = "questions.jsonl"
[model]
name = "gemini-3.8-flash"
base_url = "{base_url}"
request_timeout_s = 30.0
[limits]
requests_per_minute = {rpm}
concurrency = {concurrency}
"""


@dataclass
class Result:
    processes: int
    questions: int
    sends: int
    span_s: float
    quota_use: float
    most_in_window: int
    throttled: int
    tail_s: float
    wall_s: float
    exits: list[int]
    per_process_peak: int
    connections_peak: int


@contextmanager
def emulator(rpm: int, seed: int):
    """The emulator in a child process, enforcing ``rpm`` per minute for every model."""
    command = [sys.executable, "-m", "pipeline.emulator", "--port", "0", "--seed", str(seed)]
    command += ["--rpm", str(rpm), "--latency-ms", "400", "--latency-p99-ms", "2000"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout is not None
        match = _LISTENING.search(child.stdout.readline())
        if match is None:
            raise SystemExit("bench_fleet: the emulator did not start")
        yield match.group(1)
    finally:
        child.terminate()
        child.wait(timeout=30)


def emulator_stats(base_url: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"{base_url}/emulator/stats", timeout=10) as response:
        return orjson.loads(response.read())


async def no_autovacuum(engine: AsyncEngine) -> None:
    """Autovacuum off on every table of the job's database (so no automatic ANALYZE either)."""
    async with engine.begin() as connection:
        names = await connection.scalars(
            sa.text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        )
        for name in list(names):
            await connection.execute(
                sa.text(f'ALTER TABLE "{name}" SET (autovacuum_enabled = false)')
            )


class ConnectionWatch:
    """Samples pg_stat_activity twice a second while the fleet runs: the most connections of
    one ``ground:<pid>`` process, and of them all, on the job's database (this process's own
    engine aside)."""

    def __init__(self, server: str, database: str) -> None:
        self.server, self.database = server, database
        self.per_process = self.total = 0

    async def watch(self, stop: anyio.Event) -> None:
        engine = create_async_engine(self.server, pool_size=1)
        query = sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = :db"
            " AND application_name LIKE 'ground:%' AND application_name <> :mine"
            " GROUP BY application_name"
        )
        try:
            async with engine.connect() as connection:
                while not stop.is_set():
                    found = await connection.scalars(
                        query, {"db": self.database, "mine": f"ground:{os.getpid()}"}
                    )
                    counts = [int(n) for n in found]
                    await connection.rollback()
                    self.per_process = max(self.per_process, *counts, 0)
                    self.total = max(self.total, sum(counts))
                    with anyio.move_on_after(0.5):
                        await stop.wait()
        finally:
            await engine.dispose()


def run_fleet(job: Path, n: int, env: dict[str, str]) -> tuple[list[int], float, float]:
    """N ``ground run`` processes started together: their exit statuses, the wall clock (epoch
    seconds) at the start and when the last one exited."""
    command = [sys.executable, "-m", "pipeline.cli", "run", str(job)]
    started = time.time()
    children = [
        subprocess.Popen(
            command,
            env=env,
            cwd=job.parent,
            stdout=subprocess.DEVNULL,
            stderr=open(job.parent / f"run-{i}.log", "wb"),  # noqa: SIM115 - closed with the child
        )
        for i in range(n)
    ]
    exits = [child.wait() for child in children]
    return exits, started, time.time()


async def sends(engine: AsyncEngine) -> list[float]:
    """Every call's start (epoch seconds), in order."""
    async with engine.connect() as connection:
        rows = await connection.scalars(sa.select(calls.c.started_at).order_by(calls.c.started_at))
        return [row.timestamp() for row in rows]


def most_in_window(times: list[float], window: float = WINDOW_S) -> int:
    return max((bisect.bisect_left(times, t + window) - i for i, t in enumerate(times)), default=0)


async def one_size(server: str, n: int, args: argparse.Namespace, directory: Path) -> Result:
    run_dir = directory / f"fleet-{n}"
    run_dir.mkdir()
    write_questions(run_dir, args.questions)
    async with scratch_postgres(server, "bench_fleet") as engine:
        await migrate(engine)
        await no_autovacuum(engine)
        url = engine.url.render_as_string(hide_password=False)
        with emulator(args.rpm, seed=n) as base_url:
            job = run_dir / "job.toml"
            database = url.replace("+asyncpg", "")
            job.write_text(
                JOB.format(
                    database=database, base_url=base_url, rpm=args.rpm, concurrency=args.concurrency
                ),
                encoding="utf-8",
            )
            env = {**os.environ, "GEMINI_API_KEY": "emulator-key", "PYTHONPATH": str(REPO)}
            load = [sys.executable, "-m", "pipeline.cli", "load", str(job)]
            subprocess.run(  # noqa: ASYNC221 (before the fleet: nothing else runs meanwhile)
                load, env=env, check=True, stdout=subprocess.DEVNULL, cwd=run_dir
            )
            watch = ConnectionWatch(server, engine.url.database or "")
            stop = anyio.Event()
            async with anyio.create_task_group() as group:
                group.start_soon(watch.watch, stop)
                exits, started, ended = await anyio.to_thread.run_sync(run_fleet, job, n, env)
                stop.set()
            stats = emulator_stats(base_url)
        times = await sends(engine)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return Result(
        processes=n,
        questions=args.questions,
        sends=len(times),
        span_s=span,
        quota_use=len(times) / (args.rpm / 60 * span) if span else 0.0,
        most_in_window=most_in_window(times),
        throttled=int(stats["requests"]["by_status"].get("429", 0)),
        tail_s=ended - times[-1] if times else 0.0,
        wall_s=ended - started,
        exits=exits,
        per_process_peak=watch.per_process,
        connections_peak=watch.total,
    )


def section(results: list[Result], args: argparse.Namespace, where: str) -> str:
    lines = [
        "## A fleet of processes, to the last exit (`bench/bench_fleet.py`)",
        "",
        f"N separate `ground run` processes of one job ({args.questions:,} questions) on one"
        f" PostgreSQL ({where}; autovacuum off on the job's tables, the questions analyzed by"
        f" `ground load`), the emulator enforcing {args.rpm:,} requests a minute (p50 400 ms,"
        f" p99 2 s), concurrency {args.concurrency} a process. Tail: from the last send to the"
        f" last exit (target under {TAIL_TARGET_S:g} s at 48 processes). Connections: the most"
        f" one process held (its pool's bound is {POSTGRES_MAX_CONNECTIONS}), and all of them.",
        "",
        "| processes | sends | sending s | quota use | most sends in 60 s | 429s | tail s"
        " | wall s | connections (one; all) | exit statuses |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        codes = ", ".join(f"{code} x{r.exits.count(code)}" for code in sorted(set(r.exits)))
        lines.append(
            f"| {r.processes} | {r.sends:,} | {r.span_s:.1f} | {r.quota_use:.3f}"
            f" | {r.most_in_window:,} (quota {args.rpm:,}) | {r.throttled} | {r.tail_s:.1f}"
            f" | {r.wall_s:.1f} | {r.per_process_peak}; {r.connections_peak} | {codes} |"
        )
    command = " ".join(["bench/bench_fleet.py", *sys.argv[1:]])
    lines += ["", f"Measured {time.strftime('%Y-%m-%d')} with `{command}`."]
    return "\n".join(lines) + "\n"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="8,16,32,48", help="processes per run, commas")
    parser.add_argument("--questions", type=int, default=15_500)
    parser.add_argument("--rpm", type=int, default=6_000, help="the quota, requests a minute")
    parser.add_argument("--concurrency", type=int, default=16, help="[limits] per process")
    parser.add_argument(
        "--postgres-url",
        nargs="?",
        const=POSTGRES_URL,
        help=f"a running server instead of a private cluster ({POSTGRES_URL} if no URL given)",
    )
    parser.add_argument("--workdir", help="keep the runs' files (logs) under DIR")
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"), help="'-' prints it")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    cluster = None
    server, where = args.postgres_url, "a running server"
    if server is None:
        from bench_quota_scale import PrivateCluster

        cluster = PrivateCluster(max_connections=POSTGRES_MAX_CONNECTIONS * max(sizes) + 20)
        server = cluster.start()
        where = f"a private cluster, max_connections {cluster.max_connections}"
    results = []
    try:
        kept = nullcontext(tempfile.mkdtemp(dir=args.workdir)) if args.workdir else None
        with kept or tempfile.TemporaryDirectory() as tmp:
            for n in sizes:
                result = await one_size(server, n, args, Path(tmp))
                print(result, flush=True)
                results.append(result)
    finally:
        if cluster is not None:
            cluster.stop()
    text = section(results, args, where)
    if args.out == "-":
        print(text)
    else:
        splice(Path(args.out), "fleet", text)
        print(text)


if __name__ == "__main__":
    anyio.run(main)
