"""Which answer version each ledger call paid for: the own cost and calls of a version row.

The ledger (``calls``) records when each call started, not which answer version it made, and
answer versions record when they were stored (``answers.created_at``). The two timelines are
joined per question, and the join partitions the question's calls, so the versions' totals
add up to the question's:

* a call 1 (``step = 'ground'``) belongs to the first version stored at or after it started:
  the answer it produced, or the one that the attempts before it (failed, retried, ungrounded
  and asked again) led to. Calls started after the latest version was stored (a refresh whose
  attempts all failed) belong to the latest version: the spend of keeping it current;
* any other call (call 2, ``step = 'structure'``, and its repair retry) belongs to the
  version that was the latest when it started: call 2 reshapes the stored answer, so it starts
  after that answer's ``created_at`` and before a newer version is stored. One that started
  before the first version (a clock set back between processes) belongs to the first.

A question never answered has one row, and every call is its own. Pure, apart from
:func:`read_calls`.
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import calls

GROUND_STEP = "ground"
# The ledger totals a record carries, as pipeline.store.records names them.
LEDGER_COLUMNS = (
    "l_calls",
    "l_input_tokens",
    "l_output_tokens",
    "l_grounding_units",
    "l_cost_micro_usd",
    "l_cost_complete",
    "l_model",
)


@dataclass(frozen=True, slots=True)
class LedgerCall:
    """One row of the ledger, as the version totals need it."""

    step: str
    model: str
    started_at: dt.datetime
    input_tokens: int
    output_tokens: int
    grounding_units: int
    cost_micro_usd: int
    cost_complete: bool


def version_of(call: LedgerCall, stored_at: Sequence[dt.datetime]) -> int:
    """The position in ``stored_at`` (the versions' ``created_at``, oldest first, not empty)
    of the version ``call`` paid for (see the module docstring)."""
    last = len(stored_at) - 1
    if call.step == GROUND_STEP:
        return min(bisect_left(stored_at, call.started_at), last)
    return max(bisect_right(stored_at, call.started_at) - 1, 0)


def totals(found: Sequence[LedgerCall]) -> dict[str, Any]:
    """The ledger columns of a record (``l_*``, as :mod:`pipeline.store.records` names
    them) over ``found``; all None when there is no call, as for a question never asked."""
    if not found:
        return dict.fromkeys(LEDGER_COLUMNS)
    ground_models = [c.model for c in found if c.step == GROUND_STEP]
    return {
        "l_calls": len(found),
        "l_input_tokens": sum(c.input_tokens for c in found),
        "l_output_tokens": sum(c.output_tokens for c in found),
        "l_grounding_units": sum(c.grounding_units for c in found),
        "l_cost_micro_usd": sum(c.cost_micro_usd for c in found),
        "l_cost_complete": int(all(c.cost_complete for c in found)),
        "l_model": max(ground_models) if ground_models else None,
    }


def per_version(
    stored_at: Sequence[dt.datetime | None], found: Sequence[LedgerCall]
) -> list[dict[str, Any]]:
    """One question's ledger totals per row: ``stored_at`` holds each row's answer
    ``created_at`` in version order, or is ``[None]`` for a question never answered."""
    times = [t for t in stored_at if t is not None]
    if len(times) != len(stored_at) or not times:
        return [totals(found)]  # never answered: one row, every call its own
    shares: list[list[LedgerCall]] = [[] for _ in times]
    for call in found:
        shares[version_of(call, times)].append(call)
    return [totals(share) for share in shares]


async def read_calls(
    connection: AsyncConnection, question_ids: Sequence[int]
) -> dict[int, list[LedgerCall]]:
    """The ledger rows of these questions, per question, oldest first."""
    c = calls.c
    rows = await connection.execute(
        sa.select(
            c.question_id,
            c.step,
            c.model,
            c.started_at,
            c.input_tokens,
            c.output_tokens,
            c.grounding_units,
            c.cost_micro_usd,
            c.cost_complete,
        )
        .where(c.question_id.in_(list(question_ids)))
        .order_by(c.question_id, c.started_at, c.id)
    )
    found: dict[int, list[LedgerCall]] = {}
    for row in rows:
        found.setdefault(row.question_id, []).append(
            LedgerCall(
                row.step,
                row.model,
                row.started_at,
                int(row.input_tokens),
                int(row.output_tokens),
                int(row.grounding_units),
                int(row.cost_micro_usd),
                bool(row.cost_complete),
            )
        )
    return found


def with_version_ledger(
    rows: Sequence[Mapping[str, Any]], found: Mapping[int, Sequence[LedgerCall]]
) -> list[dict[str, Any]]:
    """``rows`` (one per answer version, a question's rows together, in version order) each
    with the ledger totals of its own version."""
    out: list[dict[str, Any]] = []
    start = 0
    while start < len(rows):
        question = rows[start]["id"]
        end = start
        while end < len(rows) and rows[end]["id"] == question:
            end += 1
        group = rows[start:end]
        shares = per_version([r["a_created_at"] for r in group], found.get(question, ()))
        out.extend({**row, **share} for row, share in zip(group, shares, strict=True))
        start = end
    return out
