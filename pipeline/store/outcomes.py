"""A group of outcomes stored in the caller's transaction: the one place that writes them.

An outcome is what came of one question's step: its answer or structured object, the ledger
rows of the calls it made, and the question's next state (:class:`StoredOutcome`; the run's
:class:`~pipeline.run.verdicts.Outcome` is one). Three callers store groups of them, each in
its own transaction and with its own budget row settled first: the online run's writer
(:mod:`pipeline.online.writer`), batch collection (:mod:`pipeline.batch.collect`) and the
outcomes an earlier run kept in its spill file (:mod:`pipeline.commands.spilled`).

A commit whose acknowledgement was lost with the connection went through: run again, it
leaves out the outcomes whose calls the ledger holds already (:func:`unstored`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Protocol, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.rows import AnswerRecord, CallRecord, StateChange, StructuredRecord
from pipeline.store.answers import StoredAnswers, VerdictOf, persist_answers
from pipeline.store.ledger import persist_calls, stored_call_keys
from pipeline.store.queue import apply_state_changes
from pipeline.store.structured import persist_structured


class StoredOutcome(Protocol):
    """What is stored of one outcome."""

    @property
    def change(self) -> StateChange | None: ...  # None: handed back untouched
    @property
    def answer(self) -> AnswerRecord | None: ...
    @property
    def structured(self) -> StructuredRecord | None: ...
    @property
    def calls(self) -> Sequence[CallRecord]: ...


StoredT = TypeVar("StoredT", bound=StoredOutcome)


async def store_outcomes(
    connection: AsyncConnection,
    batch: Sequence[StoredOutcome],
    now: dt.datetime,
    verdict_of: VerdictOf,
    owner: str | None = None,
) -> StoredAnswers:
    """Store ``batch`` in the caller's transaction: answers, structured objects, ledger rows,
    state changes. The caller settles its budget row first, if it counts one.

    Every paid outcome is kept: its ledger rows always, its answer unless that version of the
    question's answer is stored already. With ``owner`` (the online run's writer), a state
    change is written only while the question is still leased to ``owner``: a call that was
    on the wire while the process was paused past its lease answers a question another run
    holds now, whose state is that run's to write. Without it (a batch's lines, kept
    outcomes) every change is written."""
    stored = await persist_answers(
        connection, [o.answer for o in batch if o.answer is not None], now, verdict_of
    )
    await persist_structured(
        connection, [o.structured for o in batch if o.structured is not None], now
    )
    await persist_calls(connection, [c for o in batch for c in o.calls])
    await apply_state_changes(connection, [o.change for o in batch if o.change is not None], owner)
    return stored


async def unstored(connection: AsyncConnection, outcomes: Sequence[StoredT]) -> list[StoredT]:
    """``outcomes`` but those a commit stored already: one whose calls the ledger holds (a
    commit whose acknowledgement was lost with the connection went through). The rest of a
    stored outcome (its answer, structured object, state change) is stored once either way:
    their unique keys and absolute values make them safe to write again."""
    asked = [c.question_id for o in outcomes for c in o.calls if c.question_id is not None]
    if not asked:
        return list(outcomes)
    in_ledger = await stored_call_keys(connection, asked)
    return [o for o in outcomes if not any(_identity(c) in in_ledger for c in o.calls)]


def _identity(call: CallRecord) -> tuple[int | None, str, dt.datetime]:
    return (call.question_id, call.step, call.started_at)
