"""A run paused past its leases (SIGSTOP: a paused VM, a laptop lid, a long GC) while a second
run takes its questions over: when it wakes it sends none of the calls it had claimed and not
sent, and the calls it had on the wire when the pause began are paid once: their questions
stay its own (each call's wire mark leases its question for the request timeout), the second
run does not ask them again, and their answers, stored when it wakes, finish them. Counted at
the emulator against the ledger: every question paid once, its answer stored once."""

from __future__ import annotations

import datetime as dt
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import IO, Any, TypeVar

import anyio
import pytest
import sqlalchemy as sa

from pipeline.clock import utcnow
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.job.spec import JobSpec
from pipeline.store.tables import calls, questions
from tests.support import starved
from tests.support.databases import fetch_rows, postgres_database
from tests.support.jobs import generate_calls, make_job
from tests.support.ledger import assert_paid_once
from tests.support.waiting import process_exited, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

T = TypeVar("T")

N_QUESTIONS = 120
CONCURRENCY = 8
LEASE_S = 10  # seconds: short, yet a busy machine's stalls stay well inside it
REQUEST_TIMEOUT_S = 120  # seconds: the calls on the wire outlive the pause
CALLS_BEFORE_PAUSE = 24  # answered calls before the pause: the run is well under way
GROUND_MODEL = "gemini-3.8-flash"
PROCESS_TIMEOUT_S = 180  # seconds each run may take to finish after the pause
PAUSE_TRIES = 20  # pauses that landed inside a transaction, undone and tried again


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[str | None]:
    """None for the job's own SQLite file, or a fresh PostgreSQL database's URL."""
    if request.param == "sqlite":
        yield None
        return
    async with postgres_database() as url:
        yield url.replace("postgresql+asyncpg://", "postgresql://")


async def _until(
    check: Callable[[], Coroutine[Any, Any, T]], what: str, abort: Callable[[], str | None]
) -> T:
    """``check()``'s first truthy value, polled (it reads the database or the emulator)."""
    return await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: anyio.from_thread.run(check), what, abort=abort, poll=0.05)
    )


def _owned_by(pid: int) -> sa.ColumnElement[bool]:
    """Questions leased to the run of process ``pid`` (owners are ``host:pid:nonce``)."""
    return sa.and_(questions.c.state == "running", questions.c.lease_owner.like(f"%:{pid}:%"))


def _on_wire(emu: RunningEmulator) -> int:
    """generateContent requests the emulator has received and not yet answered."""
    stats = emu.stats()
    return stats["requests"]["by_model"].get(GROUND_MODEL, 0) - generate_calls(stats)


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state ``T`` in /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


async def _in_transaction(spec: JobSpec, postgres: bool) -> bool:
    """Whether some connection other than this test's holds a write transaction open (a
    process stopped inside one would keep the other run from its questions)."""
    if not postgres:
        probe = sqlite3.connect(spec.path.parent / "job.sqlite", timeout=0)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.rollback()
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            probe.close()
    rows = await fetch_rows(
        spec.database_url,
        sa.select(sa.func.count())
        .select_from(sa.text("pg_stat_activity"))
        .where(
            sa.text(
                "datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend' AND xact_start IS NOT NULL"
            )
        ),
    )
    return bool(rows[0][0])


async def _count(spec: JobSpec, statement: sa.Select) -> int:
    return int((await fetch_rows(spec.database_url, statement))[0][0])


async def _pause(child: subprocess.Popen[bytes], spec: JobSpec, emu: RunningEmulator) -> None:
    """SIGSTOP ``child`` between two transactions, with every call it was answered stored: a
    pause that lands inside a transaction is undone (SIGCONT) and tried again."""
    postgres = spec.database_url.startswith("postgresql")
    abort = process_exited(child)

    async def quiet() -> bool:
        ledger = await _count(spec, sa.select(sa.func.count()).select_from(calls))
        stored = ledger == generate_calls(emu.stats())
        return stored and not await _in_transaction(spec, postgres)

    for _ in range(PAUSE_TRIES):
        await _until(quiet, "the run storing every answer it was given", abort)
        child.send_signal(signal.SIGSTOP)
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: _stopped(child.pid), "the run stopped", abort=abort)
        )
        if await quiet():
            return
        child.send_signal(signal.SIGCONT)
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: not _stopped(child.pid), "the run resumed", abort=abort)
        )
    raise AssertionError(f"every one of {PAUSE_TRIES} pauses landed inside a transaction")


def _start(command: list[str], env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, stdout=log, stderr=log)


def _job(tmp_path: Path, emu: RunningEmulator, database: str | None) -> tuple[JobSpec, list[str]]:
    """The job, and the ``ground run`` command line for it."""
    overrides = [
        f"limits.concurrency={CONCURRENCY}",
        f"limits.lease_s={LEASE_S}",
        f"model.request_timeout_s={REQUEST_TIMEOUT_S}",
    ]
    spec = make_job(
        tmp_path,
        base_url=emu.base_url,
        n_questions=N_QUESTIONS,
        database=database,
        overrides=overrides,
    )
    command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
    return spec, command + [arg for override in overrides for arg in ("--set", override)]


# How a run is halted (stopped, or its event loop starved): run, job, emulator.
Halt = Callable[[subprocess.Popen[bytes], JobSpec, RunningEmulator], Awaitable[None]]


class Starve:
    """The run's event loop starved (:mod:`tests.support.starved`): it runs, and its loop
    does not; ``directory``: where the test and the run leave their files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def command(self, command: list[str]) -> list[str]:
        """``command`` (``python -m pipeline.cli ...``) with a loop the test can starve."""
        return [command[0], "-m", "tests.support.starved", str(self.directory), *command[3:]]

    async def __call__(
        self, run: subprocess.Popen[bytes], spec: JobSpec, emu: RunningEmulator
    ) -> None:
        (self.directory / starved.STARVE).touch()

        async def starving() -> bool:
            return (self.directory / starved.STARVING).exists()

        await _until(starving, "the run's event loop starving", process_exited(run))

    def go_on(self) -> None:
        (self.directory / starved.GO).touch()


async def _paused_past_its_leases(
    run: subprocess.Popen[bytes], spec: JobSpec, emu: RunningEmulator, halt: Halt = _pause
) -> tuple[set[int], set[int], dt.datetime]:
    """Pause ``run`` mid-way (``halt``: a SIGSTOP, or its loop starved), every caller in a call
    the emulator holds and more questions claimed behind them (claimed, not sent), until the
    leases of those not sent have run out (those on the wire are leased for the request
    timeout: their wire marks). The calls on the wire at the pause, those it had claimed and
    not sent, and when it was paused."""
    abort = process_exited(run)

    async def under_way() -> bool:
        return generate_calls(emu.stats()) >= CALLS_BEFORE_PAUSE

    await _until(under_way, f"{CALLS_BEFORE_PAUSE} answered calls", abort)
    emu.hold()

    async def all_callers_on_the_wire() -> bool:
        held = await _count(spec, sa.select(sa.func.count()).where(_owned_by(run.pid)))
        return _on_wire(emu) == CONCURRENCY and held > CONCURRENCY

    await _until(all_callers_on_the_wire, "every caller in a held call", abort)
    await halt(run, spec, emu)
    paused_at = utcnow()
    on_wire = _on_wire(emu)
    rows = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.id, questions.c.lease_expires_at).where(_owned_by(run.pid)),
    )
    marked_from = paused_at + dt.timedelta(seconds=REQUEST_TIMEOUT_S)
    marked = {row.id for row in rows if row.lease_expires_at > marked_from}
    unsent = {row.id for row in rows} - marked
    assert len(marked) == on_wire == CONCURRENCY  # each call on the wire is marked so
    assert unsent  # some claimed and not sent

    async def leases_expired() -> bool:
        live = sa.and_(_owned_by(run.pid), questions.c.lease_expires_at >= utcnow())
        return await _count(spec, sa.select(sa.func.count()).where(live)) == len(marked)

    await _until(leases_expired, "the paused run's leases running out", abort)
    return marked, unsent, paused_at


async def test_a_run_paused_past_its_leases_sends_nothing_it_had_not_sent(
    tmp_path: Path, database: str | None
) -> None:
    await _taken_over_while_halted(tmp_path, database, None)


async def test_a_run_whose_loop_starves_past_its_leases_pays_each_call_once(
    tmp_path: Path, database: str | None
) -> None:
    """The stress run's case, on purpose: no signal, the run's event loop starved (a machine
    at a load of 25) while its calls are on the wire; its heartbeat does not run, its leases
    lapse, and a second run takes over what it had not sent, and nothing it had."""
    await _taken_over_while_halted(tmp_path, database, Starve(tmp_path))


async def _taken_over_while_halted(
    tmp_path: Path, database: str | None, starve: Starve | None
) -> None:
    """A first run halted past its leases (stopped with SIGSTOP, or its loop starved) while
    a second takes over what it had claimed and not sent; then both finish."""
    config = EmulatorConfig(seed=53, ungrounded_share=0.0, latency_p50_ms=20, latency_p99_ms=60)
    with running_emulator(config) as emu:
        spec, command = _job(tmp_path, emu, database)
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        with (tmp_path / "a.log").open("wb") as a_log, (tmp_path / "b.log").open("wb") as b_log:
            first = _start(command if starve is None else starve.command(command), env, a_log)
            second: subprocess.Popen[bytes] | None = None
            try:
                on_wire, held, paused_at = await _paused_past_its_leases(
                    first, spec, emu, _pause if starve is None else starve
                )
                second = _start(command, env, b_log)

                async def taken_over() -> bool:
                    assert second is not None
                    taken = sa.select(sa.func.count()).where(
                        _owned_by(second.pid), questions.c.id.in_(held)
                    )
                    return await _count(spec, taken) == len(held)

                await _until(
                    taken_over, "the second run taking the questions over", process_exited(second)
                )
                if starve is None:
                    first.send_signal(signal.SIGCONT)
                else:
                    starve.go_on()
                emu.release()
                results = [
                    await anyio.to_thread.run_sync(lambda p=p: p.wait(timeout=PROCESS_TIMEOUT_S))
                    for p in (first, second)
                ]
            finally:
                emu.release()
                if starve is not None:
                    starve.go_on()
                for process in (first, second):
                    if process is not None and process.poll() is None:
                        process.send_signal(signal.SIGCONT)
                        process.kill()
                        process.wait()
        stats = emu.stats()
    logs = [(tmp_path / name).read_text() for name in ("a.log", "b.log")]
    for status, log in zip(results, logs, strict=True):
        assert status in (0, 1), log
        assert "Traceback" not in log
    await _paid_once(spec, stats, on_wire, held, paused_at)


async def _paid_once(
    spec: JobSpec, stats: dict, on_wire: set[int], held: set[int], paused_at: dt.datetime
) -> None:
    """Counted at the emulator against the ledger: every question paid once, its answer
    stored once, and each call on the wire at the pause is the first run's only call."""
    sent = stats["requests"]["by_model"][GROUND_MODEL]
    ledger = await fetch_rows(
        spec.database_url,
        sa.select(calls.c.question_id, calls.c.started_at).where(calls.c.step == "ground"),
    )
    paid = [q for q, _ in ledger]
    twice = len(paid) - len(set(paid))
    print(f"on the wire at the pause: {len(on_wire)}; not sent: {len(held)}; twice: {twice}")
    assert len(ledger) == sent  # every call the emulator served is in the ledger
    assert sent == N_QUESTIONS  # none asked twice: not those on the wire at the pause either
    # ... whose only calls are the paused run's, sent before the pause
    assert all(started_at < paused_at for q, started_at in ledger if q in on_wire)
    await assert_paid_once(spec.database_url, N_QUESTIONS)
    states = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.state, sa.func.count()).group_by(questions.c.state),
    )
    assert dict(states) == {"done": N_QUESTIONS}


async def test_a_run_paused_past_its_leases_alone_gives_them_back_and_finishes(
    tmp_path: Path, database: str | None
) -> None:
    """No other run took the questions: the paused run gives back what it had not sent,
    claims it afresh, and finishes; nothing is asked twice."""
    config = EmulatorConfig(seed=54, ungrounded_share=0.0, latency_p50_ms=20, latency_p99_ms=60)
    with running_emulator(config) as emu:
        spec, command = _job(tmp_path, emu, database)
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        log_path = tmp_path / "run.log"
        with log_path.open("wb") as log:
            run = _start(command, env, log)
            try:
                await _paused_past_its_leases(run, spec, emu)
                run.send_signal(signal.SIGCONT)

                async def said() -> bool:
                    return '"action":"leases_lapsed"' in log_path.read_text()

                await _until(said, "the run saying its leases ran out", process_exited(run))
                emu.release()
                status = await anyio.to_thread.run_sync(lambda: run.wait(timeout=PROCESS_TIMEOUT_S))
            finally:
                emu.release()
                if run.poll() is None:
                    run.send_signal(signal.SIGCONT)
                    run.kill()
                    run.wait()
        sent = emu.stats()["requests"]["by_model"][GROUND_MODEL]
    output = log_path.read_text()
    assert status in (0, 1), output
    assert "Traceback" not in output
    assert sent == N_QUESTIONS  # nothing asked twice
    ledger = await fetch_rows(spec.database_url, sa.select(calls.c.question_id))
    assert len(ledger) == sent
    await assert_paid_once(spec.database_url, N_QUESTIONS)
    states = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.state, sa.func.count()).group_by(questions.c.state),
    )
    assert dict(states) == {"done": N_QUESTIONS}
