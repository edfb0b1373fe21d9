"""Who holds a claimed question, and the statements a run makes on its leases.

A run leases what it claims to its *owner*, ``host:pid:nonce`` (:func:`default_owner`): unique
per run, and it tells a later run on the same host whether the owner died (:func:`pid_alive`),
so that run takes the questions back at once instead of waiting for the leases to expire
(:func:`release_dead_runs`, which also drops the expired budget holds of dead runs). While it
works, a run extends the leases of everything in flight (:func:`heartbeat`), and sends a call
only while its own record says the lease holds (:mod:`pipeline.online.fence`); what it claimed
but did not finish it releases at its end (:func:`pipeline.store.queue.release`), what it finds
it no longer holds at once.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import socket
import time

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.limits.job_limits import JobLimits
from pipeline.store import queue
from pipeline.store import quota as shared_quota

__all__ = [
    "default_owner",
]

DEAD_OWNER_SWEEP_S = 15.0  # seconds between two sweeps for dead owners' leases and budget holds


def default_owner() -> str:
    """``host:pid:nonce``: unique per run, and tells a later run on this host if we died."""
    return f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(32):08x}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


async def release_dead_runs(connection: AsyncConnection, job_id: int) -> int:
    """Take back what runs that died left: their budget holds (once expired) and their leases
    (on this host: at once); the number of questions released."""
    host = socket.gethostname()
    await shared_quota.drop_holds(connection, job_id, now=time.time())
    return await queue.release_dead_owners(connection, job_id, host, pid_alive)


async def heartbeat(
    connection: AsyncConnection,
    owner: str,
    ids: list[int],
    lease: dt.timedelta,
    limits: JobLimits,
) -> list[int]:
    """Extend ``owner``'s leases on ``ids`` (and its budget hold: that row first, before the
    question rows, as every transaction locks them); the ids still ``owner``'s."""
    await limits.heartbeat(connection)
    return await queue.extend_leases(connection, owner, ids, lease)
