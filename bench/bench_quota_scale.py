"""The shared quota at 50 to 400 worker processes against one PostgreSQL (not a test).

Each **simulated process** is what ``ground worker`` runs, minus the model: its own database
connection, the product's :class:`~pipeline.limits.JobLimits` (the shared rate's grants, a
GCRA ``UPDATE ... RETURNING`` on the job's ``requests`` row), a claimer leasing questions
with :func:`pipeline.store.queue.claim` (and the dead-owner sweep), ``concurrency`` callers
that each wait for a slot (``limits.requests.acquire()``) and then "call" for a lognormal
latency (median ``--latency``, p99 about 5x), a writer that commits each commit window as the
runner's does (budget settled first, the ledger rows, the state changes), and the heartbeat
(:func:`pipeline.online.leases.heartbeat`, every lease / 4). Many simulated processes share
one OS process (``--os-processes`` of them, each an event loop): 400 real interpreters do
not fit on 2 cores, and nothing on the database side can tell the difference.

The fleet is sized to want ``--overcommit`` times the job's quota (``--rpm``), whatever the
number of processes: each process's callers can send ``overcommit x rate / processes`` a
second, so a design that shares the quota well uses all of it.

Per size it reports the grants per second, the grant transaction's p50/p99 latency and the
quota used over the steady state, the most sends in any 60 s window (never above the quota),
PostgreSQL's CPU (from /proc, every process of the cluster), its connections and the
backends waiting on a lock (sampled each second).

By default the database is a **private, throw-away PostgreSQL cluster** (same binaries,
initdb defaults: fsync and synchronous_commit on, 128 MB shared buffers), started as the
``postgres`` user on a free port with ``max_connections`` sized to the run, and stopped at
the end: the shared test server's ``max_connections`` (100) cannot be raised without a
restart, and its CPU would mix in other runs. ``--postgres-url`` uses a running server
instead (sizes that do not fit its free connections are skipped, saying so).

    .venv/bin/python bench/bench_quota_scale.py                    # 50,100,200,400; ~15 min
    .venv/bin/python bench/bench_quota_scale.py --sizes 50 --seconds 20 --no-baseline  # quick
    .venv/bin/python bench/bench_quota_scale.py --baseline   # the design before, alone

``--out`` (default ``BENCHMARKS.md``) gets the markdown section (bench/sections.py);
``--out -`` prints it instead.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import gc
import json
import math
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.sections import splice  # noqa: E402
from pipeline import event_loop  # noqa: E402
from pipeline.job.states import QuestionState  # noqa: E402
from pipeline.limits import job_limits  # noqa: E402
from pipeline.limits.job_limits import JobLimits  # noqa: E402
from pipeline.online import leases  # noqa: E402
from pipeline.online.runner import CLAIM_BATCH, IN_FLIGHT_PER_SLOT, refill_batch  # noqa: E402
from pipeline.online.writer import WRITE_BATCH_MAX, WRITE_LINGER_S  # noqa: E402
from pipeline.rows import CallRecord, StateChange  # noqa: E402
from pipeline.store import queue  # noqa: E402
from pipeline.store import quota as shared_quota  # noqa: E402
from pipeline.store.database import Database  # noqa: E402
from pipeline.store.engine import create_engine, migrate  # noqa: E402
from pipeline.store.ledger import persist_calls  # noqa: E402
from pipeline.store.tables import jobs  # noqa: E402

T = TypeVar("T")

SECTION = "bench_quota_scale"
WINDOW_S = 60.0  # the server's quota window
LATENCY_SIGMA = math.log(5) / 2.326  # lognormal: p99 = 5 x the median
LEASE_S = 120.0  # [online] lease_s's default
COST_MICRO = 1_000  # what one simulated call costs (the writer counts it in the budget row)
GRANT = "a rate grant"  # the product's name for the grant transaction
TARGET_USE = 0.98  # the target at 400 processes
WARMUP_S = 20.0  # seconds left out at the start (at most a quarter of the run)
TARGET_P99_MS = 50.0
CONNECTIONS_SPARE = 20  # the private cluster's connections beyond the simulated processes'


# -- one OS process: many simulated worker processes ------------------------------------------


Times = dict[str, list[tuple[float, float]]]  # by what was timed: (wall clock at start, seconds)


def record(times: Times, what: str, at: float, started: float) -> None:
    """``what`` began at ``at`` (wall clock) and ``started`` (perf counter), and ends now."""
    times.setdefault(what, []).append((at, time.perf_counter() - started))


class TimedDatabase(Database):
    """The product's :class:`Database`, timing each transaction by its name."""

    __slots__ = ("times",)

    def __init__(self, engine: Any, times: Times) -> None:
        super().__init__(engine, outage_s=60.0)
        self.times = times

    def _timed(
        self, what: str, statement: Callable[[AsyncConnection], Awaitable[T]]
    ) -> Callable[[AsyncConnection], Awaitable[T]]:
        """``statement``, its own time recorded as ``what + " (statements)"``."""

        async def timed(connection: AsyncConnection) -> T:
            at, started = time.time(), time.perf_counter()
            try:
                return await statement(connection)
            finally:
                record(self.times, what + " (statements)", at, started)

        return timed

    async def transaction(
        self, what: str, statement: Callable[[AsyncConnection], Awaitable[T]]
    ) -> T:
        at, started = time.time(), time.perf_counter()
        try:
            return await super().transaction(what, self._timed(what, statement))
        finally:
            record(self.times, what, at, started)

    async def autocommit(
        self, what: str, statement: Callable[[AsyncConnection], Awaitable[T]]
    ) -> T:
        at, started = time.time(), time.perf_counter()
        try:
            return await super().autocommit(what, self._timed(what, statement))
        finally:
            record(self.times, what, at, started)


@dataclass
class Shared:
    """What the simulated processes of one OS process record."""

    sends: list[float] = field(default_factory=list)
    times: Times = field(default_factory=dict)
    grants: int = 0
    slots: int = 0  # granted
    unsent: int = 0  # granted, and no caller took them
    # SQLAlchemy's compiled statements, shared by the simulated processes of an OS process:
    # a real process compiles each statement once at its start, not all 400 at once here.
    compiled: dict[Any, Any] = field(default_factory=dict)


async def simulated_process(
    spec: dict[str, Any], concurrency: int, shared: Shared, ready: anyio.Event, go: anyio.Event
) -> None:
    """One ``ground worker`` process as the database sees it (see the module docstring)."""
    engine = create_async_engine(
        spec["url"], pool_size=spec["pool"], max_overflow=0, pool_timeout=300
    ).execution_options(compiled_cache=shared.compiled)
    db = TimedDatabase(engine, shared.times)
    job_id, owner = spec["job_id"], leases.default_owner()
    limits = JobLimits(db, job_id, owner, requests_per_minute=spec["rpm"])
    if spec["baseline"]:
        limits.requests.sizing = "job"
    lease = dt.timedelta(seconds=LEASE_S)
    try:
        await limits.start()
        ready.set()
        await go.wait()
        stop_at = spec["stop_at"]
        in_flight: set[int] = set()
        hand: deque[int] = deque()
        have_work = anyio.Event()
        progress = anyio.Event()
        outcomes: list[tuple[int, float, float]] = []
        wrote = anyio.Event()
        high_water = concurrency * IN_FLIGHT_PER_SLOT
        refill = refill_batch(concurrency)
        median = spec["latency"]

        async def claimer() -> None:
            nonlocal have_work, progress
            next_sweep = time.monotonic() + random.uniform(0, leases.DEAD_OWNER_SWEEP_S)
            while True:
                free = high_water - len(in_flight)
                if free < refill:
                    with anyio.move_on_after(2.0):
                        await progress.wait()
                    progress = anyio.Event()
                    continue
                if time.monotonic() > next_sweep:
                    next_sweep = time.monotonic() + leases.DEAD_OWNER_SWEEP_S
                    await db.transaction(
                        "releasing dead runs' leases",
                        lambda c: leases.release_dead_runs(c, job_id),
                    )
                want = min(free, CLAIM_BATCH)
                batch = await db.transaction(
                    "claiming", lambda c, n=want: queue.claim(c, job_id, owner, n, lease)
                )
                in_flight.update(q.id for q in batch)
                hand.extend(q.id for q in batch)
                have_work.set()
                if not batch:
                    await anyio.sleep(1.0)

        async def caller() -> None:
            nonlocal have_work
            while True:
                if not hand:
                    have_work = anyio.Event() if have_work.is_set() else have_work
                    await have_work.wait()
                    continue
                question = hand.popleft()
                await limits.requests.acquire()
                sent = time.time()
                if sent < stop_at:
                    shared.sends.append(sent)
                latency = random.lognormvariate(math.log(median), LATENCY_SIGMA)
                await anyio.sleep(latency)
                await limits.requests.on_success()
                outcomes.append((question, sent, latency))
                wrote.set()

        async def writer() -> None:
            nonlocal wrote, progress
            while True:
                await wrote.wait()
                await anyio.sleep(WRITE_LINGER_S)
                wrote = anyio.Event()
                batch = outcomes[:WRITE_BATCH_MAX]
                del outcomes[:WRITE_BATCH_MAX]
                if outcomes:
                    wrote.set()
                records = [
                    CallRecord(
                        question,
                        "ground",
                        "simulated",
                        dt.datetime.fromtimestamp(sent, dt.UTC),
                        latency * 1000,
                        200,
                        "ok",
                        input_tokens=100,
                        output_tokens=300,
                        cost_micro_usd=COST_MICRO,
                    )
                    for question, sent, latency in batch
                ]
                changes = [StateChange(question, QuestionState.DONE, 1) for question, *_ in batch]

                async def store(
                    c: AsyncConnection,
                    records: list[CallRecord] = records,
                    changes: list[StateChange] = changes,
                ) -> None:
                    # As the runner's writer: the budget row first, then the ledger, the states.
                    spent = sum(r.cost_micro_usd for r in records)
                    if spec["baseline"]:  # before, a job without a budget counted too
                        await shared_quota.settle_budget(c, job_id, owner, 0, spent)
                    else:
                        await limits.settle(c, released=0, spent=spent)
                    await persist_calls(c, records)
                    await queue.apply_state_changes(c, changes)

                await db.transaction("the writer's commit", store)
                in_flight.difference_update(question for question, *_ in batch)
                progress.set()

        async def heartbeat() -> None:
            await anyio.sleep(random.uniform(0, LEASE_S / 4))  # processes start at any time
            while True:
                ids = list(in_flight)
                await db.transaction(
                    "the heartbeat",
                    lambda c, ids=ids: leases.heartbeat(c, owner, ids, lease, limits),
                )
                await anyio.sleep(LEASE_S / 4)

        with anyio.move_on_after(max(stop_at - time.time(), 0)):
            async with anyio.create_task_group() as group:
                group.start_soon(claimer)
                group.start_soon(writer)
                group.start_soon(heartbeat)
                for _ in range(concurrency):
                    group.start_soon(caller)
        shared.grants += limits.requests.grants
        shared.slots += limits.requests.slots
        shared.unsent += limits.requests.slots - limits.requests.sent
    finally:
        ready.set()
        await engine.dispose()


async def worker_main(spec: dict[str, Any]) -> dict[str, Any]:
    shared = Shared()
    go = anyio.Event()
    readies = [anyio.Event() for _ in spec["concurrency"]]
    cpu_at_start = 0.0

    async def wait_for_go() -> None:
        nonlocal cpu_at_start
        for ready in readies:
            await ready.wait()
        # A real process holds one engine, this one a hundred: a full collection here walks a
        # hundred processes' objects at once and stalls them all (6 of 240-330 ms a run, and
        # grants of 0.7-1 s at the p99). What the set-up made is kept out of the collector and
        # full collections are made rare, as they would be short in any one real process.
        gc.freeze()
        gc.set_threshold(*gc.get_threshold()[:2], 1_000)
        gc_started = (0.0, 0.0)

        def gc_timer(phase: str, info: dict[str, int]) -> None:
            nonlocal gc_started
            if phase == "start":
                gc_started = (time.time(), time.perf_counter())
            elif info["generation"] == 2:
                record(shared.times, "gc gen2", *gc_started)

        gc.callbacks.append(gc_timer)
        print("ready", flush=True)
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        start_at = float(line)
        spec["stop_at"] = start_at + spec["seconds"]
        await anyio.sleep(max(start_at - time.time(), 0))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu_at_start = usage.ru_utime + usage.ru_stime
        go.set()

    async def loop_lag() -> None:
        await go.wait()
        while time.time() < spec["stop_at"]:
            at, started = time.time(), time.perf_counter()
            await anyio.sleep(0.05)
            record(shared.times, "event-loop lag", at, started + 0.05)

    async with anyio.create_task_group() as group:
        group.start_soon(wait_for_go)
        group.start_soon(loop_lag)
        for i, concurrency in enumerate(spec["concurrency"]):
            # Connect a few at a time, as processes that start one after another would.
            group.start_soon(simulated_process, spec, concurrency, shared, readies[i], go)
            if i % 10 == 9:
                await anyio.sleep(0.05)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "sends": shared.sends,
        "times": shared.times,
        "grants": shared.grants,
        "slots": shared.slots,
        "unsent": shared.unsent,
        "cpu_s": usage.ru_utime + usage.ru_stime - cpu_at_start,
    }


# -- the database ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateCluster:
    """A throw-away PostgreSQL cluster of the installed version, as ``postgres`` when root."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self.dir = Path(tempfile.mkdtemp(prefix="quota_scale_pg_"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.bin = self._bindir()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    @staticmethod
    def _bindir() -> Path:
        found = shutil.which("pg_ctl")
        if found:
            return Path(found).parent
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not versions:
            raise SystemExit("bench_quota_scale: no PostgreSQL binaries (pg_ctl) found")
        return versions[-1].parent

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, stdout=subprocess.DEVNULL)

    def start(self) -> str:
        if self.as_user:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir}"
            f" -c max_connections={self.max_connections}"
        )
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
            "-l", str(self.dir / "log"), "-w", "start",
        )  # fmt: skip
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def postmaster(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _cpu_ticks(pid: int) -> tuple[int, int] | None:
    """``(ppid, utime + stime)`` of ``pid`` from /proc, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


class PostgresCpu:
    """CPU seconds of a set of PostgreSQL processes, from /proc: every child of ``postmaster``
    (a private cluster), or the backends ``pids()`` names (a shared server)."""

    def __init__(self, postmaster: int | None) -> None:
        self.postmaster = postmaster
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}

    def sample(self, backends: set[int]) -> None:
        if self.postmaster is not None:
            pids = {self.postmaster}
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    stat = _cpu_ticks(int(entry.name))
                    if stat is not None and stat[0] == self.postmaster:
                        pids.add(int(entry.name))
        else:
            pids = backends
        for pid in pids:
            stat = _cpu_ticks(pid)
            if stat is not None:
                self.first.setdefault(pid, stat[1])
                self.last[pid] = stat[1]

    def seconds(self) -> float:
        ticks = sum(self.last[pid] - self.first[pid] for pid in self.last)
        return ticks / os.sysconf("SC_CLK_TCK")


async def admin_execute(url: str, sql: str) -> None:
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as connection:
            await connection.execute(sa.text(sql))
    finally:
        await admin.dispose()


async def prepare_database(server_url: str, questions: int) -> tuple[str, int]:
    """A fresh database on the server, migrated, with one job of ``questions`` pending."""
    name = f"bench_quota_scale_{uuid.uuid4().hex[:8]}"
    await admin_execute(server_url, f'CREATE DATABASE "{name}"')
    url = server_url.rsplit("/", 1)[0] + f"/{name}"
    engine = create_engine(url)
    try:
        await migrate(engine)
        async with engine.begin() as connection:
            job_id = await connection.scalar(
                jobs.insert()
                .values(name="quota-scale", created_at=dt.datetime.now(dt.UTC))
                .returning(jobs.c.id)
            )
            await connection.execute(
                sa.text(
                    "INSERT INTO questions (job_id, qid, text, state, attempts,"
                    " structure_attempts, created_at, updated_at)"
                    " SELECT :job, 'q' || g, 'question ' || g, 'pending', 0, 0, now(), now()"
                    " FROM generate_series(1, :n) AS g"
                ),
                {"job": job_id, "n": questions},
            )
        async with engine.connect() as connection:
            await connection.execute(sa.text("ANALYZE questions"))
    finally:
        await engine.dispose()
    return url, int(job_id)


# -- one size -------------------------------------------------------------------------------------


@dataclass
class SizeResult:
    design: str
    processes: int
    concurrency: str
    seconds: float
    sends: int
    grants: int
    grant_tx: int
    grant_p50_ms: float
    grant_p99_ms: float
    commit_p99_ms: float
    use: float
    steady_s: float
    window_s: float
    most_in_window: int
    window_quota: float
    pg_cores: float
    sim_cores: float
    connections: int
    lock_waiters_mean: float
    lock_waiters_max: int
    lag_p50_ms: float
    lag_p99_ms: float
    load: float
    note: str = ""


def percentile(values: list[float], share: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def most_in_a_window(sends: list[float], window: float) -> int:
    """The most sends in any half-open window ``[t, t + window)`` (each starting at a send)."""
    return max(
        (bisect.bisect_left(sends, t + window, i) - i for i, t in enumerate(sends)), default=0
    )


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def run_size(
    args: argparse.Namespace, server_url: str, postmaster: int | None, size: int, baseline: bool
) -> SizeResult:
    rate = args.rpm / 60.0
    mean_latency = args.latency * math.exp(LATENCY_SIGMA**2 / 2)
    # Callers per process so that the fleet wants `overcommit` x the quota: a caller sends
    # 1 / mean_latency a second.
    per_process = args.overcommit * rate / size
    concurrency = [
        max(args.min_callers, c)
        for c in split(round(per_process * mean_latency * size), size)  # spread the remainder
    ]
    questions = (
        int(args.overcommit * rate * args.seconds * 1.1) + size * 2 * max(concurrency) + 1000
    )
    url, job_id = await prepare_database(server_url, questions)
    os_processes = max(1, min(args.os_processes, size))
    work = Path(tempfile.mkdtemp(prefix="quota_scale_"))
    procs = []
    try:
        at = 0
        for i, count in enumerate(split(size, os_processes)):
            spec = {
                "url": url,
                "job_id": job_id,
                "rpm": args.rpm,
                "latency": args.latency,
                "seconds": args.seconds,
                "pool": args.pool,
                "baseline": baseline,
                "concurrency": concurrency[at : at + count],
                "out": str(work / f"out{i}.json"),
            }
            at += count
            (work / f"spec{i}.json").write_text(json.dumps(spec), encoding="utf-8")
            procs.append(
                subprocess.Popen(  # noqa: ASYNC220 (set-up, before the measured part)
                    [sys.executable, __file__, "--worker", str(work / f"spec{i}.json")],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    # asyncpg's complaints about connections closed on a lagging loop at exit
                    stderr=(work / f"stderr{i}.txt").open("w"),
                    text=True,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
            if line.strip() != "ready":
                errors = "".join(p.read_text()[-2000:] for p in work.glob("stderr*.txt"))  # noqa: ASYNC240
                raise SystemExit(
                    f"bench_quota_scale: a worker failed to start ({size} processes)\n{errors}"
                )
        start_at = time.time() + 1.0
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start_at}\n")
            proc.stdin.flush()
        cpu = PostgresCpu(postmaster)
        name = url.rsplit("/", 1)[1]
        admin = create_async_engine(server_url, pool_size=1)
        connections: list[int] = []
        waiters: list[int] = []
        try:
            async with admin.connect() as connection:
                await anyio.sleep(max(start_at - time.time(), 0))
                while time.time() < start_at + args.seconds:
                    rows = (
                        await connection.execute(
                            sa.text(
                                "SELECT pid, wait_event_type FROM pg_stat_activity"
                                " WHERE datname = :name"
                            ),
                            {"name": name},
                        )
                    ).all()
                    connections.append(len(rows))
                    waiters.append(sum(1 for row in rows if row.wait_event_type == "Lock"))
                    cpu.sample({row.pid for row in rows})
                    await connection.rollback()
                    await anyio.sleep(min(1.0, max(start_at + args.seconds - time.time(), 0)))
                cpu.sample(set(cpu.last))
        finally:
            await admin.dispose()
        for proc in procs:
            await anyio.to_thread.run_sync(proc.wait)
        results = [json.loads((work / f"out{i}.json").read_text()) for i in range(len(procs))]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
        await admin_execute(
            server_url, f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'
        )
    warmup = min(WARMUP_S, args.seconds / 4)
    steady_from = start_at + warmup

    def steady_ms(what: str) -> list[float]:
        """``what``'s times in ms, of those begun in the steady state (start-up left out: 400
        processes claiming and drawing their first grants at once)."""
        return [
            d * 1000 for r in results for at, d in r["times"].get(what, []) if at >= steady_from
        ]

    for what in sorted({w for r in results for w in r["times"]}):
        values = steady_ms(what)
        print(
            f"  {what}: {len(values)} in the steady state, p50 {percentile(values, 0.5):.1f} ms,"
            f" p99 {percentile(values, 0.99):.1f} ms, max {max(values, default=math.nan):.1f} ms",
            file=sys.stderr,
        )
    print(
        f"  slots granted {sum(r['slots'] for r in results)},"
        f" unsent {sum(r['unsent'] for r in results)}",
        file=sys.stderr,
    )
    sends = sorted(t for r in results for t in r["sends"])
    grant_times = steady_ms(GRANT)
    commit_times = steady_ms("the writer's commit")
    lags = steady_ms("event-loop lag")
    steady = len(sends) - bisect.bisect_left(sends, steady_from)
    steady_s = args.seconds - warmup
    window = min(WINDOW_S, float(args.seconds))
    return SizeResult(
        design="baseline" if baseline else "current",
        processes=size,
        concurrency=f"{min(concurrency)}-{max(concurrency)}"
        if min(concurrency) != max(concurrency)
        else str(concurrency[0]),
        seconds=args.seconds,
        sends=len(sends),
        grants=sum(r["grants"] for r in results),
        grant_tx=sum(len(r["times"].get(GRANT, [])) for r in results),
        grant_p50_ms=percentile(grant_times, 0.5),
        grant_p99_ms=percentile(grant_times, 0.99),
        commit_p99_ms=percentile(commit_times, 0.99),
        use=steady / (rate * steady_s),
        steady_s=steady_s,
        window_s=window,
        most_in_window=most_in_a_window(sends, window),
        window_quota=args.rpm * window / WINDOW_S,
        pg_cores=cpu.seconds() / args.seconds,
        sim_cores=sum(r["cpu_s"] for r in results) / args.seconds,
        connections=max(connections, default=0),
        lock_waiters_mean=statistics.fmean(waiters) if waiters else 0.0,
        lock_waiters_max=max(waiters, default=0),
        lag_p50_ms=percentile(lags, 0.5),
        lag_p99_ms=percentile(lags, 0.99),
        load=os.getloadavg()[0],
    )


# -- the report --------------------------------------------------------------------------------


def table(results: list[SizeResult]) -> list[str]:
    lines = [
        "| design | processes | callers each | connections | grants/s (refused/s) |"
        " grant p50 / p99 ms | writer commit p99 ms | sends/s | quota use |"
        " most sends in a window (quota) | PostgreSQL CPU, cores | lock waiters mean / max |"
        " simulator CPU, cores | simulator loop lag p50 / p99 ms | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        over = r.most_in_window > r.window_quota
        lines.append(
            f"| {r.design} | {r.processes} | {r.concurrency} | {r.connections} |"
            f" {r.grants / r.seconds:,.0f} ({(r.grant_tx - r.grants) / r.seconds:,.0f}) |"
            f" {r.grant_p50_ms:.1f} / {r.grant_p99_ms:.1f} | {r.commit_p99_ms:.1f} |"
            f" {r.sends / r.seconds:,.0f} | {r.use:.4f} |"
            f" {r.most_in_window:,} in {r.window_s:.0f} s ({r.window_quota:,.0f})"
            f"{' **over**' if over else ''} | {r.pg_cores:.2f} |"
            f" {r.lock_waiters_mean:.1f} / {r.lock_waiters_max} | {r.sim_cores:.2f} |"
            f" {r.lag_p50_ms:.0f} / {r.lag_p99_ms:.0f} | {r.load:.1f} |"
        )
    return lines


def verdict(results: list[SizeResult]) -> list[str]:
    lines = []
    for design in dict.fromkeys(r.design for r in results):
        ours = [r for r in results if r.design == design]
        largest = max(ours, key=lambda r: r.processes)
        met = (
            largest.use >= TARGET_USE
            and all(r.most_in_window <= r.window_quota for r in ours)
            and largest.grant_p99_ms < TARGET_P99_MS
        )
        lines.append(
            f"* **{design}** at {largest.processes} processes: quota use {largest.use:.4f}"
            f" (target >= {TARGET_USE}), grant p99 {largest.grant_p99_ms:.1f} ms (target <"
            f" {TARGET_P99_MS:.0f}), never over the quota in a window:"
            f" {'yes' if all(r.most_in_window <= r.window_quota for r in ours) else '**no**'}"
            f" -> {'met' if met else '**not met**'}"
        )
    return lines


def render(args: argparse.Namespace, results: list[SizeResult], server: str, took: float) -> str:
    rate = args.rpm / 60.0
    lines = [
        "### Shared quota at scale (PostgreSQL; `bench/bench_quota_scale.py`)",
        "",
        f"Simulated `ground worker` processes against one PostgreSQL ({server}); each holds"
        f" {args.pool} connection{'s' if args.pool > 1 else ''} and runs the product's shared"
        ' rate (`JobLimits`), claims, writer commits and heartbeat, its callers "calling" for'
        f" a lognormal {args.latency * 1000:.0f} ms median (p99 5x). The job's quota is"
        f" {args.rpm:,} RPM ({rate:,.0f}/s, paced {1 - job_limits.PACING_HEADROOM:.3f} of it);"
        f" the fleet wants {args.overcommit}x the quota whatever its size (each process has at"
        f" least {args.min_callers} callers). {args.seconds:.0f} s per size"
        f" ({args.baseline_seconds:.0f} s for the baseline), {args.os_processes} OS"
        f" processes, quota use and latencies over the steady state (the first {WARMUP_S:.0f} s"
        " left out: 400 processes connecting, claiming and drawing their first grants at once"
        " keep both cores busy for 10-12 s). Run"
        f" {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, took {took:.0f} s, on a shared 2-core"
        " machine: `load` is its 1-minute load average at the end of each run.",
        "`baseline` is the design before demand-sized grants (`--baseline`): every grant 0.5 s of"
        " the job's rate, in a transaction, and every writer commit counting the spend in the"
        " budget row; `current` grants what the process needs, in autocommit, from a row that"
        f" queues grants up to {job_limits.QUEUE_S:.0f} s ahead (a refused one waits a share of"
        " the queue before it).",
        "",
        *table(results),
        "",
        *verdict(results),
    ]
    notes = [r for r in results if r.note]
    lines += [f"* {r.design}, {r.processes}: {r.note}" for r in notes]
    return "\n".join(lines) + "\n"


async def orchestrate(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    designs = [True] if args.baseline_only else ([False] if args.no_baseline else [True, False])
    started = time.perf_counter()
    cluster = None
    if args.postgres_url:
        server_url, postmaster = args.postgres_url, None
        server = "a running server: CPU is its backends' for this database"
    else:
        cluster = PrivateCluster(max(sizes) * args.pool + CONNECTIONS_SPARE)
        server_url = cluster.start()
        postmaster = cluster.postmaster()
        server = (
            f"a private cluster of the installed version, max_connections"
            f" {cluster.max_connections}, otherwise initdb's defaults; CPU is every process of it"
        )
    results: list[SizeResult] = []
    try:
        admin = create_async_engine(server_url, pool_size=1)
        async with admin.connect() as connection:
            version = await connection.scalar(sa.text("SHOW server_version"))
            limit = int(await connection.scalar(sa.text("SHOW max_connections")))
            used = int(await connection.scalar(sa.text("SELECT count(*) FROM pg_stat_activity")))
        await admin.dispose()
        server = f"PostgreSQL {version}, {server}"
        for size in sizes:
            if size * args.pool + 5 > limit - used:
                print(
                    f"{size} processes: skipped, they need {size * args.pool} connections and the"
                    f" server has {limit - used} free (max_connections {limit}; raising it needs"
                    " a restart)",
                    flush=True,
                )
                continue
            for baseline in designs:
                seconds = args.baseline_seconds if baseline else args.seconds
                result = await run_size(
                    argparse.Namespace(**{**vars(args), "seconds": seconds}),
                    server_url,
                    postmaster,
                    size,
                    baseline,
                )
                results.append(result)
                print("\n".join(table([result])[2:]), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
    if not results:
        return 1
    text = render(args, results, server, time.perf_counter() - started)
    if args.out == "-":
        print(text)
    else:
        splice(Path(args.out), SECTION, text)
        print(text)
        print(f"wrote the section into {args.out}")
    return 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        spec = json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
        result = event_loop.run(worker_main, spec)
        Path(spec["out"]).write_text(json.dumps(result), encoding="utf-8")
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="50,100,200,400", help="simulated processes, comma-separated"
    )
    parser.add_argument("--seconds", type=float, default=100.0, help="measured seconds per size")
    parser.add_argument(
        "--baseline-seconds", type=float, default=40.0, help="the same for the baseline"
    )
    parser.add_argument(
        "--rpm", type=int, default=6_000, help="the job's quota, requests per minute"
    )
    parser.add_argument("--latency", type=float, default=0.4, help="median call latency, seconds")
    parser.add_argument(
        "--overcommit", type=float, default=1.5, help="the fleet's demand / the quota"
    )
    parser.add_argument(
        "--min-callers", type=int, default=16, help="callers per simulated process, at least"
    )
    parser.add_argument(
        "--os-processes", type=int, default=4, help="OS processes the fleet runs in"
    )
    parser.add_argument("--pool", type=int, default=1, help="connections per simulated process")
    parser.add_argument(
        "--postgres-url", default="", help="a running server (default: a private cluster)"
    )
    parser.add_argument(
        "--baseline",
        "--baseline-only",
        dest="baseline_only",
        action="store_true",
        help="only the design before demand-sized grants (by default both run, side by side)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="only the current design")
    parser.add_argument(
        "--out", default=str(REPO / "BENCHMARKS.md"), help="a file to splice the section into, or -"
    )
    args = parser.parse_args()  # fmt: skip
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: expected whole numbers, comma-separated")
    if not sizes or min(sizes) <= 0:
        parser.error(f"--sizes {args.sizes!r}: expected positive numbers of processes")
    if args.min_callers <= 0 or args.os_processes <= 0 or args.pool <= 0:
        parser.error("--min-callers, --os-processes and --pool must be positive")
    if args.baseline_seconds <= 0:
        args.baseline_seconds = args.seconds
    if args.seconds <= 0 or args.rpm <= 0 or args.latency <= 0 or args.overcommit <= 0:
        parser.error("--seconds, --rpm, --latency and --overcommit must be positive")
    return event_loop.run(orchestrate, args)


if __name__ == "__main__":
    sys.exit(main())
