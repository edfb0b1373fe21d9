"""A storage that refuses is told apart from a database that is away, and named at once."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import anyio
import pytest
from sqlalchemy import exc as sa_exc

from pipeline.store.database import (
    DatabaseOutage,
    FileIdentity,
    StorageFault,
    retrying,
    storage_fault,
    trouble_of,
)
from pipeline.store.engine import database_problem

pytestmark = pytest.mark.anyio


def _operational(message: str) -> sa_exc.OperationalError:
    return sa_exc.OperationalError("INSERT ...", {}, sqlite3.OperationalError(message))


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__("could not extend file")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (_operational("database or disk is full"), "the database's disk is full"),
        (_operational("attempt to write a readonly database"), "the database is read-only"),
        (_operational("disk I/O error"), "the database file cannot be written"),
        (_PgError("53100"), "the database server's disk is full (SQLSTATE 53100)"),
        (_PgError("25006"), "the database is read-only"),
    ],
)
def test_each_refusing_storage_is_named(error: BaseException, said: str) -> None:
    assert (storage_fault(error) or "").startswith(said)


@pytest.mark.parametrize(
    "error",
    [_operational("database is locked"), ConnectionResetError(), _PgError("08006")],
)
def test_a_lost_connection_or_a_lock_is_no_storage_fault(error: BaseException) -> None:
    assert storage_fault(error) is None


async def test_a_full_disk_is_raised_at_once_not_waited_out() -> None:
    tries = 0

    async def insert() -> None:
        nonlocal tries
        tries += 1
        raise _operational("database or disk is full")

    started = time.monotonic()
    with pytest.raises(StorageFault, match=r"^the database's disk is full .*, during storing$"):
        await retrying(insert, outage_s=300, what="storing")
    assert tries == 1
    assert time.monotonic() - started < 1


async def test_a_stop_ends_the_wait_for_a_lost_database_at_once() -> None:
    given_up = anyio.Event()

    async def connect() -> None:
        raise ConnectionRefusedError("connection refused")

    async def stop_soon() -> None:
        await anyio.sleep(0.2)
        given_up.set()

    started = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(stop_soon)
        with pytest.raises(DatabaseOutage, match="the run is stopping"):
            await retrying(connect, outage_s=300, what="storing", given_up=given_up)
    assert time.monotonic() - started < 5  # not database_outage_s


def test_a_database_that_cannot_be_opened_names_the_full_disk() -> None:
    message = database_problem("sqlite:////x/job.sqlite", _operational("database or disk is full"))
    assert message == (
        "cannot open the database /x/job.sqlite: the database's disk is full"
        " (database or disk is full)"
    )


def test_the_file_opened_is_watched_by_device_and_inode(tmp_path: Path) -> None:
    path = tmp_path / "job.sqlite"
    path.write_bytes(b"x")
    opened = FileIdentity.of(str(path))
    assert opened is not None
    assert opened.problem() is None
    with path.open("rb"):  # held open, as SQLite holds it: its inode is not reused
        path.unlink()
        assert opened.problem() == f"the database file {path} was removed during the run"
        with pytest.raises(StorageFault, match="was removed during the run, before storing"):
            opened.check("storing")
        path.write_bytes(b"another")  # a new file at the same path: another inode
        assert "replaced by another" in (opened.problem() or "")


async def test_any_error_after_the_file_was_removed_names_the_removal(tmp_path: Path) -> None:
    """Removed mid-commit, the driver's words vary (a new empty file has no tables, a lock, an
    I/O error): the cause named is the file, at once, not a wait for a lost connection."""
    path = tmp_path / "job.sqlite"
    path.write_bytes(b"x")
    opened = FileIdentity.of(str(path))
    tries = 0

    async def insert() -> None:
        nonlocal tries
        tries += 1
        raise _operational("no such table: ground_calls")

    with path.open("rb"):
        path.unlink()
        with pytest.raises(
            StorageFault, match=r"was removed during the run, during storing outcomes$"
        ):
            await retrying(insert, outage_s=300, what="storing outcomes", file=opened)
    assert tries == 1


@pytest.mark.parametrize("way", ["transaction", "autocommit"])
async def test_each_way_into_a_lost_database_stops_waiting_once_the_run_gives_up(way: str) -> None:
    """The shared rate's grants go through ``autocommit``: a stopping run must not wait a lost
    database out there either (a SIGTERM would take ``database_outage_s``)."""
    import socket

    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    from pipeline.store.database import Database

    with socket.socket() as probe:  # a port nothing listens on: every connect is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = create_async_engine(f"postgresql+asyncpg://ground@127.0.0.1:{port}/jobs")
    db = Database(engine, outage_s=300)
    db.give_up()
    started = time.monotonic()
    try:
        with pytest.raises(DatabaseOutage, match="the run is stopping"):
            await getattr(db, way)("a grant", lambda c: c.execute(sa.text("SELECT 1")))
    finally:
        await engine.dispose()
    assert time.monotonic() - started < 5  # not database_outage_s


def _pg_dbapi_error(sqlstate: str, message: str) -> sa_exc.DBAPIError:
    """A PostgreSQL error as SQLAlchemy raises it over asyncpg: a plain DBAPIError whose
    driver error carries the SQLSTATE."""
    driver = _PgError(sqlstate)
    driver.args = (message,)
    return sa_exc.DBAPIError("UPDATE questions ...", {}, driver)


@pytest.mark.parametrize(
    "error",
    [
        _pg_dbapi_error("55P03", "canceling statement due to lock timeout"),
        _pg_dbapi_error("57014", "canceling statement due to statement timeout"),
        _pg_dbapi_error("40P01", "deadlock detected"),
        _pg_dbapi_error("40001", "could not serialize access due to concurrent update"),
        _operational("database is locked"),
    ],
)
def test_a_lock_or_a_timeout_is_storage_trouble_to_wait_out(error: BaseException) -> None:
    assert trouble_of(error) == "lock"
    assert storage_fault(error) is None


@pytest.mark.parametrize(
    "error",
    [
        sa_exc.IntegrityError("INSERT ...", {}, _PgError("23505")),
        sa_exc.ProgrammingError("SELECT ...", {}, _PgError("42P01")),
        ValueError("a bug"),
    ],
)
def test_a_constraint_or_a_bug_is_no_storage_trouble(error: BaseException) -> None:
    assert trouble_of(error) is None


async def test_a_lock_that_outlasts_the_allowance_is_an_outage_in_one_line() -> None:
    tries = 0

    async def update() -> None:
        nonlocal tries
        tries += 1
        raise _pg_dbapi_error("55P03", "canceling statement due to lock timeout")

    with pytest.raises(DatabaseOutage) as raised:
        await retrying(update, outage_s=0.5, what="storing outcomes")
    assert str(raised.value) == (
        "the database stayed locked by another session for 0.5 s ([job] database_outage_s),"
        " during storing outcomes: canceling statement due to lock timeout"
    )
    assert tries > 1  # waited out, not raised at once


async def test_a_lock_released_in_time_lets_the_operation_through() -> None:
    tries = 0

    async def update() -> str:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise _pg_dbapi_error("55P03", "canceling statement due to lock timeout")
        return "stored"

    assert await retrying(update, outage_s=30, what="storing outcomes") == "stored"


def test_no_connection_free_in_the_pool_is_waited_out_like_a_lost_one() -> None:
    """The pool is bounded (pipeline.store.engine): a checkout that waited past pool_timeout
    is storage trouble, so a run's transaction retries it within database_outage_s."""
    error = sa_exc.TimeoutError("QueuePool limit of size 2 overflow 3 reached")
    assert trouble_of(error) == "connection"
    assert storage_fault(error) is None


async def test_a_pool_that_stays_exhausted_is_an_outage_in_one_line() -> None:
    async def checkout() -> None:
        raise sa_exc.TimeoutError("QueuePool limit of size 2 overflow 3 reached")

    with pytest.raises(DatabaseOutage) as raised:
        await retrying(checkout, outage_s=0.3, what="storing outcomes")
    assert "database_outage_s" in str(raised.value) and "\n" not in str(raised.value)
