"""``[notify]``'s outbox: webhook events written when they happen (in the transaction of what
they tell, where there is one), then delivered by :mod:`pipeline.notify.outbox`.

An event's row holds the exact body POSTed and its ``message_id`` (the ``webhook-id``), so a
delivery tried again, by this run or by the next one after a crash, is the same message. A
row is claimed for one attempt by moving its ``next_at`` past the attempt's timeout (a
conditional update: two processes never both send it), then marked ``sent``, given a later
``next_at`` (the backoff) or ``failed``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import notify_deliveries as nd

__all__ = [
    "PendingEvent",
    "claim",
    "mark_failed",
    "mark_retry",
    "mark_sent",
    "pending_events",
    "record_event",
]

PENDING = "pending"
SENT = "sent"
FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """An event still to deliver."""

    id: int
    message_id: str
    event: str
    body: bytes
    attempts: int
    next_at: dt.datetime


def event_body(name: str, data: Mapping[str, Any], at: dt.datetime) -> bytes:
    """The JSON POSTed for the event ``name`` that happened at ``at``: Standard Webhooks'
    payload shape, ``{"type", "timestamp", "data"}``."""
    document = {
        "type": name,
        "timestamp": at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "data": dict(data),
    }
    return orjson.dumps(document)


async def record_event(
    connection: AsyncConnection, job_id: int, name: str, data: Mapping[str, Any], at: dt.datetime
) -> str:
    """Write the event ``name`` of job ``job_id`` as pending; its message id (webhook-id)."""
    message_id = f"msg_{uuid.uuid4().hex}"
    await connection.execute(
        nd.insert().values(
            job_id=job_id,
            message_id=message_id,
            event=name,
            body=event_body(name, data, at).decode(),
            state=PENDING,
            attempts=0,
            created_at=at,
            next_at=at,
        )
    )
    return message_id


def _pending(job_id: int) -> sa.ColumnElement[bool]:
    return sa.and_(nd.c.job_id == job_id, nd.c.state == PENDING)


async def pending_events(
    connection: AsyncConnection, job_id: int, *, limit: int = 100
) -> Sequence[PendingEvent]:
    """The job's pending events, the oldest first (due or not)."""
    rows = await connection.execute(
        sa.select(nd.c.id, nd.c.message_id, nd.c.event, nd.c.body, nd.c.attempts, nd.c.next_at)
        .where(_pending(job_id))
        .order_by(nd.c.id)
        .limit(limit)
    )
    return [
        PendingEvent(r.id, r.message_id, r.event, r.body.encode(), r.attempts, r.next_at)
        for r in rows
    ]


async def claim(
    connection: AsyncConnection, event_id: int, now: dt.datetime, lease_until: dt.datetime
) -> bool:
    """Take the pending event ``event_id`` for one attempt, when it is due: no other process
    takes it before ``lease_until``. False: not due, or no longer pending."""
    claimed = await connection.execute(
        nd.update()
        .where(nd.c.id == event_id, nd.c.state == PENDING, nd.c.next_at <= now)
        .values(next_at=lease_until, attempts=nd.c.attempts + 1)
    )
    return claimed.rowcount == 1


async def mark_sent(connection: AsyncConnection, event_id: int, now: dt.datetime) -> None:
    await connection.execute(
        nd.update().where(nd.c.id == event_id).values(state=SENT, sent_at=now, last_error=None)
    )


async def mark_retry(
    connection: AsyncConnection, event_id: int, next_at: dt.datetime, error: str
) -> None:
    """Another attempt at ``next_at``; ``error`` (no URL, no secret) says why the last failed."""
    await connection.execute(
        nd.update()
        .where(nd.c.id == event_id, nd.c.state == PENDING)
        .values(next_at=next_at, last_error=error)
    )


async def mark_failed(connection: AsyncConnection, event_id: int, error: str) -> None:
    """Given up: no further attempt."""
    await connection.execute(
        nd.update().where(nd.c.id == event_id).values(state=FAILED, last_error=error)
    )


async def delivery_counts(connection: AsyncConnection, job_id: int) -> dict[str, int]:
    """The job's events by state."""
    rows = await connection.execute(
        sa.select(nd.c.state, sa.func.count()).where(nd.c.job_id == job_id).group_by(nd.c.state)
    )
    return {row[0]: row[1] for row in rows}
