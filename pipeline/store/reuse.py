"""Reused answers (``[job] reuse_answers_within``): finding a stored answer to the same
request, and what its sources were resolved to.

An answer is stored with its ``reuse_key`` (:func:`pipeline.job.calls.reuse_key`: the
backend, the model and the exact call-1 body, so the question text, tools and prompt
settings). A question asked with the same key, in any job of the database, may take the
latest *grounded* answer stored under it within the window, unless that answer is itself a
copy (``reused_from``): copies point at the answer that was paid for.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import SourceState, Verdict
from pipeline.store.tables import answers, sources

# A copied answer's sources keep these verdicts; the rest are judged and resolved afresh.
KEPT_VERDICTS = (SourceState.RESOLVED, SourceState.DIRECT)


@dataclass(frozen=True, slots=True)
class Reusable:
    """A stored answer another question may take: its id and its call-1 response."""

    answer_id: int
    raw_response: str


async def reusable_answer(
    connection: AsyncConnection, reuse_key: str, since: dt.datetime
) -> Reusable | None:
    """The latest grounded answer stored under ``reuse_key`` at or after ``since`` that is
    not itself a copy; None when there is none."""
    a = answers.c
    row = (
        await connection.execute(
            sa.select(a.id, a.raw_response)
            .where(
                a.reuse_key == reuse_key,
                a.created_at >= since,
                a.grounded.is_(True),
                a.reused_from.is_(None),
            )
            .order_by(a.created_at.desc(), a.id.desc())
            .limit(1)
        )
    ).first()
    return None if row is None else Reusable(int(row.id), row.raw_response)


async def origin_verdicts(
    connection: AsyncConnection, answer_ids: Sequence[int]
) -> dict[int, dict[int, Verdict]]:
    """answer id -> chunk index -> what that answer's source was resolved to (resolved or
    direct ones only): a copy keeps its original's destinations instead of resolving
    redirect links that may have expired since."""
    if not answer_ids:
        return {}
    s = sources.c
    rows = await connection.execute(
        sa.select(s.answer_id, s.chunk_index, s.resolve_status, s.destination).where(
            s.answer_id.in_(sorted(set(answer_ids))), s.resolve_status.in_(KEPT_VERDICTS)
        )
    )
    found: dict[int, dict[int, Verdict]] = {}
    for answer_id, chunk_index, status, destination in rows:
        found.setdefault(answer_id, {})[chunk_index] = Verdict(status, destination)
    return found


async def reusable_answers(
    connection: AsyncConnection, reuse_keys: Sequence[str], since: dt.datetime
) -> dict[str, Reusable]:
    """:func:`reusable_answer` for many keys in one query: key -> the latest grounded
    original stored under it at or after ``since`` (a key without one is left out)."""
    if not reuse_keys:
        return {}
    a = answers.c
    rows = await connection.execute(
        sa.select(a.reuse_key, a.id, a.raw_response)
        .where(
            a.reuse_key.in_(sorted(set(reuse_keys))),
            a.created_at >= since,
            a.grounded.is_(True),
            a.reused_from.is_(None),
        )
        .order_by(a.created_at, a.id)
    )
    return {key: Reusable(int(id_), raw) for key, id_, raw in rows}  # the latest wins
