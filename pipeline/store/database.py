"""Riding out a database that goes away or is locked, and telling a refusing storage apart.

Riding out a database that goes away or is locked: retry an operation, with backoff.

A PostgreSQL restart, a failover or ``pg_terminate_backend`` breaks the pool's connections;
SQLAlchemy invalidates them and the next checkout opens a new one. A lock held by another
session (a migration, a DBA's ``LOCK``, a long ``ALTER``) makes a statement fail once it has
waited ``lock_timeout`` (the database's own, or :data:`LOCK_WAIT_S` in a transaction of
:class:`Database`), or ``statement_timeout``; a deadlock or a serialization failure rolls
the transaction back; SQLite says "database is locked" after its busy timeout. Each is
storage trouble, not a crash: :func:`retrying` re-runs the whole operation (a transaction:
it rolled back) until it succeeds, or raises :class:`DatabaseOutage` once the trouble has
lasted ``outage_s``. Other errors are raised at once; a storage that refuses (a full disk, a
read-only file, :func:`storage_fault`) raises :class:`StorageFault` at once, and a run
that is stopping no longer waits a lost connection out. Messages never carry the URL.
:class:`Database` is how a run reaches its database: every transaction through it is retried so.

A database that answers but cannot keep what it is given, told apart from one that is away.

An unreachable server is waited out (:func:`retrying`): it comes back. A full
disk, a read-only file or a database file that was removed does not come back by waiting, so
each is named at once in one line (:class:`StorageFault`), and the run keeps what it could not
store elsewhere (:mod:`pipeline.run.spill`).

* :func:`storage_fault`: what an error from the driver says about the storage, or None;
* :class:`FileIdentity`: the SQLite file as opened (device and inode); :meth:`~FileIdentity.check`
  says when the path no longer leads to it (removed, or replaced by another file).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.errors import GroundError

__all__ = [
    "Database",
    "DatabaseOutage",
    "FileIdentity",
    "StorageFault",
    "is_connection_error",
    "retrying",
    "storage_fault",
    "storage_trouble",
    "trouble_of",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

RECONNECT_FIRST_S = 0.1  # seconds: the first wait after a lost connection
RECONNECT_MAX_S = 5.0  # seconds: the longest wait between two tries
# A transaction of a run (through Database) waits at most this long for a lock another session
# holds (a migration, a DBA's LOCK, a long ALTER) when the database or role sets no
# lock_timeout of its own; it then fails and is retried within [job] database_outage_s like an
# outage, so a lock held for good ends the run with what it paid for kept, not a run waiting
# forever. Set for the transaction only (SET LOCAL): other commands wait on locks as before.
LOCK_WAIT_S = 5
_LOCK_WAIT = sa.text(
    "SELECT set_config('lock_timeout', :wait, true)"
    " WHERE current_setting('lock_timeout') IN ('0', '0ms')"
).bindparams(wait=f"{LOCK_WAIT_S}s")
# SQLSTATEs worth re-running the transaction for: 08 connection exception, 57P admin
# shutdown / crash shutdown / cannot connect now.
_CONNECTION_SQLSTATES = ("08", "57P")
# ... and the locks: 55P03 lock_not_available (lock_timeout, NOWAIT), 57014 query_canceled
# (statement_timeout), 40001 / 40P01 a serialization failure or a deadlock (each rolled the
# transaction back whole).
_LOCK_SQLSTATES = ("55P03", "57014", "40001", "40P01")
# SQLite's words once its busy timeout has passed (SQLITE_BUSY, SQLITE_LOCKED).
_SQLITE_LOCKED = ("database is locked", "database table is locked")
_CONNECTION_ERROR_NAMES = frozenset(
    {
        "ConnectionDoesNotExistError",
        "InterfaceError",
        "CannotConnectNowError",
        # asyncpg's protocol left mid-operation by a dropped connection ("cannot switch to
        # state ...; another operation is in progress")
        "InternalClientError",
    }
)


Trouble = Literal["connection", "lock"]


def trouble_of(error: BaseException) -> Trouble | None:
    """What ``error`` says is wrong with the storage, worth waiting out: ``"lock"`` (a lock
    held elsewhere, a timeout, a deadlock), ``"connection"`` (lost, or not made), or None."""
    if _is_lock_error(error):
        return "lock"
    if _is_connection_error(error):
        return "connection"
    return None


def is_connection_error(error: BaseException) -> bool:
    """Whether ``error`` is storage trouble worth waiting out (see :func:`trouble_of`)."""
    return trouble_of(error) is not None


def _chain(error: BaseException) -> list[BaseException]:
    """``error``, the driver's error it wraps, and their causes."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = getattr(current, "orig", None) or current.__cause__
    return seen


def _is_lock_error(error: BaseException) -> bool:
    for link in _chain(error):
        state = getattr(link, "sqlstate", None) or getattr(link, "pgcode", None)
        if isinstance(state, str) and state.startswith(_LOCK_SQLSTATES):
            return True
        if any(words in str(link).lower() for words in _SQLITE_LOCKED):
            return True
    return False


def _lock_reason(error: BaseException) -> str:
    """The driver's first line for a lock error ("canceling statement due to lock timeout")."""
    driver = _chain(error)[-1]
    lines = str(driver).strip().splitlines()
    return lines[0] if lines else type(driver).__name__


def _is_connection_error(error: BaseException) -> bool:
    """Whether ``error`` means the connection was lost or could not be made."""
    if isinstance(error, sa_exc.DBAPIError):
        if error.connection_invalidated:
            return True
        if isinstance(error, sa_exc.InterfaceError):
            return True
        orig = error.orig
        if type(orig).__name__ in _CONNECTION_ERROR_NAMES:
            return True
        state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        if isinstance(state, str) and state.startswith(_CONNECTION_SQLSTATES):
            return True
        cause = getattr(orig, "__cause__", None)
        if cause is not None and cause is not error and _is_connection_error(cause):
            return True
        # Lost connections and a SQLite database locked past its busy timeout alike.
        return isinstance(error, sa_exc.OperationalError)
    # No connection free in the process's pool within its timeout (pool_timeout): the pool is
    # bounded (pipeline.store.engine), so a checkout that waits that long is waited out too.
    if isinstance(error, (ConnectionError, TimeoutError, OSError, sa_exc.TimeoutError)):
        return True
    state = getattr(error, "sqlstate", None)  # asyncpg's own errors, raised outside SQLAlchemy
    return type(error).__name__ in _CONNECTION_ERROR_NAMES or (
        isinstance(state, str) and state.startswith(_CONNECTION_SQLSTATES)
    )


async def retrying(
    operation: Callable[[], Awaitable[T]],
    *,
    outage_s: float,
    what: str,
    given_up: anyio.Event | None = None,
    file: FileIdentity | None = None,
) -> T:
    """Run ``operation`` until it gets through the lost connections and the locks (see the
    module).

    A storage that refuses (a full disk, a read-only file: :func:`storage_fault`) raises
    :class:`StorageFault` at once: waiting would not help. So does any error once ``file``
    (the SQLite file as opened) is no longer at its path: whatever the driver says then (an
    I/O error, a new empty file without tables), the cause is the file. Once ``given_up`` is
    set (the run is stopping) a lost connection is no longer waited out: :class:`DatabaseOutage`
    at once.
    """
    deadline: float | None = None
    delay = RECONNECT_FIRST_S
    while True:
        try:
            return await operation()
        except Exception as error:
            problem = file.problem() if file is not None else None
            if problem is not None:
                raise StorageFault(f"{problem}, during {what}") from None
            fault = storage_fault(error)
            if fault is not None:
                raise StorageFault(f"{fault}, during {what}") from None
            trouble = trouble_of(error)
            if trouble is None:
                raise
            now = time.monotonic()
            if given_up is not None and given_up.is_set():
                raise DatabaseOutage(
                    f"{_UNAVAILABLE[trouble]} during {what}, and the run is stopping:"
                    f" {_named(trouble, error)}"
                ) from None
            if deadline is None:
                deadline = now + outage_s
                _log_trouble(trouble, what, error)
            if now >= deadline:
                raise DatabaseOutage(
                    f"{_UNAVAILABLE[trouble]} for {outage_s:g} s ([job] database_outage_s),"
                    f" during {what}: {_named(trouble, error)}"
                ) from None
            wait = min(delay * (0.5 + random.random()), deadline - now)
            with anyio.move_on_after(wait):
                if given_up is None:
                    await anyio.sleep_forever()
                else:
                    await given_up.wait()
            delay = min(delay * 2, RECONNECT_MAX_S)


def storage_trouble(error: BaseException) -> str | None:
    """One line for ``error`` when it is storage trouble met outside a retried transaction
    (a command's own statement, waiting on a lock past the database's ``lock_timeout``);
    None for any other error."""
    trouble = trouble_of(error)
    if trouble is None:
        return None
    return (
        f"{_UNAVAILABLE[trouble]} ({_named(trouble, error)}): run the command again once the"
        " database is free (what it committed before stays)"
    )


_UNAVAILABLE: dict[Trouble, str] = {
    "connection": "the database could not be reached",
    "lock": "the database stayed locked by another session",
}


def _named(trouble: Trouble, error: BaseException) -> str:
    """The error, in words safe to print (a lost connection's text may name the server)."""
    return _lock_reason(error) if trouble == "lock" else type(error).__name__


def _log_trouble(trouble: Trouble, what: str, error: BaseException) -> None:
    if trouble == "lock":
        log.warning(
            "waiting on storage during %s: the database is locked by another session (%s);"
            " retrying",
            what,
            _lock_reason(error),
            extra={"action": "db_locked", "error": type(error).__name__},
        )
        return
    log.warning(
        "database connection lost during %s: reconnecting",
        what,
        extra={"action": "db_reconnect", "error": type(error).__name__},
    )


class Database:
    """A run's way into the job's database: every transaction and read of a run, online or in
    batch mode, goes through :meth:`transaction` or :meth:`read`, each retried whole across
    lost connections for ``outage_s`` seconds (then :class:`DatabaseOutage`).

    ``what`` names the operation in the one warning a lost connection logs and in the outage's
    message. ``engine`` stays reachable for what streams its own reads page by page.
    """

    __slots__ = ("_given_up", "engine", "file", "outage_s")

    def __init__(
        self, engine: AsyncEngine, *, outage_s: float, file: FileIdentity | None = None
    ) -> None:
        """``file``: the SQLite file as opened, watched by :meth:`check_file`."""
        self.engine = engine
        self.outage_s = outage_s
        self.file = file
        self._given_up: anyio.Event | None = None

    def give_up(self) -> None:
        """The run is stopping: a lost connection is no longer waited out (the first
        SIGTERM works at once; what could not be stored is kept elsewhere)."""
        self._event().set()

    def _event(self) -> anyio.Event:
        if self._given_up is None:
            self._given_up = anyio.Event()
        return self._given_up

    def check_file(self, what: str) -> None:
        """Raise :class:`StorageFault` when the SQLite file opened is no longer at its path
        (removed, or replaced); nothing for PostgreSQL or an in-memory database."""
        if self.file is not None:
            self.file.check(what)

    async def transaction(
        self, what: str, statement: Callable[[AsyncConnection], Awaitable[T]]
    ) -> T:
        """``statement`` in one transaction, committed; run again whole after a lost
        connection (it rolled back with the connection). A cancellation (a second Ctrl-C)
        waits for the transaction's end: cut mid-way, its connection would keep the write
        lock, and SQLite would refuse every later write of the run (the paid answers)."""

        async def once() -> T:
            with anyio.CancelScope(shield=True):
                async with self.engine.begin() as connection:
                    await _bounded_lock_wait(connection)
                    return await statement(connection)
            raise AssertionError("unreachable: nothing outside can cancel this scope")

        return await retrying(
            once, outage_s=self.outage_s, what=what, given_up=self._event(), file=self.file
        )

    async def autocommit(
        self, what: str, statement: Callable[[AsyncConnection], Awaitable[T]]
    ) -> T:
        """``statement`` with each of its statements committed on its own (no BEGIN/COMMIT
        round trips): a row it updates is locked only while the server runs the statement,
        not while the client gets round to committing. For one conditional UPDATE that must
        not queue the other processes behind this one (the shared rate's grants)."""

        async def once() -> T:
            async with self.engine.connect() as connection:
                connection = await connection.execution_options(isolation_level="AUTOCOMMIT")
                return await statement(connection)

        return await retrying(
            once, outage_s=self.outage_s, what=what, given_up=self._event(), file=self.file
        )

    async def read(self, what: str, statement: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """``statement`` on a connection of its own, nothing committed; run again after a
        lost connection."""

        async def once() -> T:
            async with self.engine.connect() as connection:
                await _bounded_lock_wait(connection)
                return await statement(connection)

        return await retrying(
            once, outage_s=self.outage_s, what=what, given_up=self._event(), file=self.file
        )

    async def rows(self, what: str, query: sa.Select[*tuple[Any, ...]]) -> Sequence[sa.Row[Any]]:
        """Every row of ``query`` (a page of a paged read), read like :meth:`read`."""

        async def fetch(connection: AsyncConnection) -> Sequence[sa.Row[Any]]:
            return (await connection.execute(query)).all()

        return await self.read(what, fetch)


async def _bounded_lock_wait(connection: AsyncConnection) -> None:
    """:data:`LOCK_WAIT_S` as the transaction's ``lock_timeout`` on PostgreSQL, unless the
    database or role sets one (kept as it is)."""
    if connection.dialect.name == "postgresql":
        await connection.execute(_LOCK_WAIT)


# -- faults --------------------------------------------------------------------------------


# SQLite's messages (sqlite3_errstr) for the result codes that mean the storage refuses.
_SQLITE_FAULTS = (
    ("database or disk is full", "the database's disk is full"),  # SQLITE_FULL
    ("attempt to write a readonly database", "the database is read-only"),  # SQLITE_READONLY
    ("disk i/o error", "the database file cannot be written"),  # SQLITE_IOERR
    ("unable to open database file", "the database file cannot be opened"),  # SQLITE_CANTOPEN
)
# PostgreSQL's SQLSTATEs: 53100 disk_full, 53200 out_of_memory, 25006 read_only_sql_transaction.
_POSTGRES_FAULTS = {
    "53100": "the database server's disk is full",
    "53200": "the database server is out of memory",
    "25006": "the database is read-only (a standby, or default_transaction_read_only)",
}


class DatabaseOutage(GroundError):
    """The database stayed unreachable for longer than ``[job] database_outage_s``, or the run
    stopped while it was away (:mod:`pipeline.store.database`)."""


class StorageFault(DatabaseOutage):
    """The database cannot store what it is given (full, read-only, removed); waiting for it
    would not help. Its message is one line naming the cause."""


def storage_fault(error: BaseException) -> str | None:
    """``cause (driver's words)`` when ``error`` says the storage refuses; None otherwise
    (a lost connection, a constraint, a bug)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        state = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(state, str) and state in _POSTGRES_FAULTS:
            return f"{_POSTGRES_FAULTS[state]} (SQLSTATE {state})"
        text = str(current).strip().splitlines()[0] if str(current).strip() else ""
        lowered = text.lower()
        for words, cause in _SQLITE_FAULTS:
            if words in lowered:
                return f"{cause} ({words})"
        current = getattr(current, "orig", None) or current.__cause__
    return None


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """A SQLite database file as it was opened: its path, device and inode."""

    path: str
    device: int
    inode: int

    @classmethod
    def of(cls, path: str) -> FileIdentity | None:
        """The file ``path`` names now; None when there is none (nothing to watch)."""
        try:
            found = os.stat(path)
        except OSError:
            return None
        return cls(path, found.st_dev, found.st_ino)

    def problem(self) -> str | None:
        """Why ``path`` no longer leads to the file opened; None while it does."""
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return f"the database file {self.path} was removed during the run"
        except OSError as exc:
            return f"the database file {self.path} cannot be reached: {exc.strerror or exc}"
        if (found.st_dev, found.st_ino) != (self.device, self.inode):
            return (
                f"the database file {self.path} was removed and replaced by another during the run"
            )
        return None

    def check(self, what: str) -> None:
        """Raise :class:`StorageFault` when the file opened is no longer at its path."""
        problem = self.problem()
        if problem is not None:
            raise StorageFault(f"{problem}, before {what}")
