"""A database that answers but cannot keep what it is given, told apart from one that is away.

An unreachable server is waited out (:mod:`pipeline.store.database`): it comes back. A full
disk, a read-only file or a database file that was removed does not come back by waiting, so
each is named at once in one line (:class:`StorageFault`), and the run keeps what it could not
store elsewhere (:mod:`pipeline.run.spill`).

* :func:`storage_fault`: what an error from the driver says about the storage, or None;
* :class:`FileIdentity`: the SQLite file as opened (device and inode); :meth:`~FileIdentity.check`
  says when the path no longer leads to it (removed, or replaced by another file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pipeline.errors import GroundError

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
