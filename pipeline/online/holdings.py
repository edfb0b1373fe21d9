"""What one run's process holds: the questions in hand, and of them those on the wire.

A question is *in hand* from its claim until its final change in this run is stored, or it is
given back unasked. It is *on the wire* from its call's wire mark (:mod:`pipeline.online.wire`)
until that call's response is in (or the call failed): its answer may be on its way, and it
is paid either way.

The pool gives back what it holds and has not sent: a question that a claim brings back while
it is still in hand (its lease ran out here, another run took it and gave it back, or the
writer stored its outcome and has yet to let go of it), what it finds it no longer holds, and
its leftovers at the end. A question on the wire it never gives back
(:meth:`Holdings.not_held`): its answer is paid, and its question is this run's to finish. Once
the response is in, the writer stores it; an answer whose lease lapsed meanwhile finishes its
question all the same (:func:`~pipeline.store.queue.apply_state_changes`, ``finishing``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.rows import ClaimedQuestion
from pipeline.store import queue
from pipeline.store.database import Database

__all__ = [
    "Holdings",
]


class Holdings:
    """The questions ``owner`` (this process's run) holds in ``db``: in hand (with their
    input's own ids), on the wire, and claimed but gone back unasked (released with the
    leftovers)."""

    __slots__ = ("_db", "_on_wire", "_owner", "_qids", "in_hand", "unstarted")

    def __init__(self, db: Database, owner: str) -> None:
        self._db = db
        self._owner = owner
        self.in_hand: set[int] = set()
        self.unstarted: list[int] = []
        self._qids: dict[int, str] = {}
        self._on_wire: set[int] = set()

    def __len__(self) -> int:
        return len(self.in_hand)

    def __contains__(self, question_id: object) -> bool:
        return question_id in self.in_hand

    def __iter__(self) -> Iterator[int]:
        return iter(self.in_hand)

    def took(self, batch: Iterable[ClaimedQuestion]) -> None:
        """A claim leased ``batch`` to this process."""
        for question in batch:
            self.in_hand.add(question.id)
            self._qids[question.id] = question.qid

    def qid(self, question_id: int) -> str | None:
        """The input's own id of a question in hand."""
        return self._qids.get(question_id)

    def sent(self, question_id: int) -> None:
        """A call for ``question_id`` is going on the wire (its wire mark is stored)."""
        self._on_wire.add(question_id)

    def answered(self, question_id: int) -> None:
        """The call for ``question_id`` is over: its response is in, or it failed."""
        self._on_wire.discard(question_id)

    def on_wire(self, question_id: int) -> bool:
        """Whether a call of this process for ``question_id`` may still be answered."""
        return question_id in self._on_wire

    def left(self, question_id: int) -> None:
        """``question_id`` left this process: finished, or given back unasked."""
        self.in_hand.discard(question_id)
        self._qids.pop(question_id, None)
        self._on_wire.discard(question_id)

    async def not_held(
        self, batch: list[ClaimedQuestion], wire_cover: dt.timedelta
    ) -> list[ClaimedQuestion]:
        """A claim's ``batch`` without the questions this process still holds (a claim may
        bring one back: its lease ran out here, another run took it over and gave it back
        since, or its outcome is stored and the writer has yet to let go of it, while it is
        still in hand): never in two of this process's hands. Of those, the ones not on the
        wire go back to the queue at once; the ones on the wire stay this run's (the claim
        leased them here again), their wire marks renewed for ``wire_cover`` (the claim
        shortened them): never given back while their calls may be answered."""
        again = {q.id for q in batch if q.id in self.in_hand}
        if not again:
            return batch
        give_back = {i for i in again if i not in self._on_wire}
        sent = list(again - give_back)

        async def sort_out(connection: AsyncConnection) -> None:
            await queue.release(connection, self._owner, give_back)
            await queue.extend_leases(connection, self._owner, sent, wire_cover)

        await self._db.transaction("sorting out questions still held", sort_out)
        # Those given back, not those still held now: the writer may have let go of one
        # meanwhile (its outcome was committed just before this claim), and that one is in
        # the queue again, no longer ours to ask.
        return [q for q in batch if q.id not in again]

    async def give_back(self, question_id: int) -> None:
        """``question_id``, not sent, leaves this process and goes back to the queue unless
        another run holds it now."""
        self.left(question_id)
        await self._db.transaction(
            "giving back a lapsed lease", lambda c: queue.release(c, self._owner, [question_id])
        )

    async def release_leftovers(self) -> None:
        """At the end: every question still in hand or gone back unasked goes back."""
        leftovers = set(self.unstarted) | self.in_hand
        if leftovers:
            await self._db.transaction(
                "releasing leftovers", lambda c: queue.release(c, self._owner, leftovers)
            )
            self.in_hand.clear()
            self._qids.clear()
            self._on_wire.clear()
