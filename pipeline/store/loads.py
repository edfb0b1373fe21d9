"""The fingerprint of the question file a job last loaded (``source_loads``, one row per job).

The loader compares it before reading the file (:mod:`pipeline.intake.loader`): size and
mtime equal, or else the content digest equal, and the settings equal, means the file is
unchanged and is not read again.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.store.tables import source_loads
from pipeline.store.upsert import insert_ignoring_conflicts


@dataclass(frozen=True, slots=True)
class Fingerprint:
    path: str
    size: int
    mtime_ns: int
    digest: str  # of the content, hex
    settings: str  # of what shapes the rows, hex
    rows: int = 0  # the load's count (added + existing)


async def stored_fingerprint(connection: AsyncConnection, job_id: int) -> Fingerprint | None:
    """The fingerprint stored with the job's last complete load; None when there is none."""
    s = source_loads.c
    row = (
        await connection.execute(
            sa.select(s.path, s.size, s.mtime_ns, s.digest, s.settings, s.rows).where(
                s.job_id == job_id
            )
        )
    ).one_or_none()
    if row is None:
        return None
    return Fingerprint(row.path, row.size, row.mtime_ns, row.digest, row.settings, row.rows)


async def save_fingerprint(connection: AsyncConnection, job_id: int, print_: Fingerprint) -> None:
    """Store ``print_`` as the job's last complete load, replacing the one before."""
    values = {
        "path": print_.path,
        "size": print_.size,
        "mtime_ns": print_.mtime_ns,
        "digest": print_.digest,
        "settings": print_.settings,
        "rows": print_.rows,
        "loaded_at": utcnow(),
    }
    s = source_loads.c
    updated = await connection.execute(
        source_loads.update().where(s.job_id == job_id).values(**values)
    )
    if updated.rowcount == 0:
        # Two loads finishing together: the first insert wins, and both store the same file.
        await connection.execute(
            insert_ignoring_conflicts(connection, source_loads).values(job_id=job_id, **values)
        )
