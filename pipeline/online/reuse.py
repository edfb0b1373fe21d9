"""Repeated questions in an online run: answered once, reused after (``[job]
reuse_answers_within``).

Every managed call-1 answer is stamped with the call's settings fingerprint and its reuse key
(:meth:`pipeline.job.calls.CallPlan.reuse_key`), whether reuse is on or not, so that turning
it on later finds the answers already paid for. With reuse on, a question about to be asked
first looks for a grounded answer stored under its key within the window, in any job of the
database (:mod:`pipeline.store.reuse`); found, the answer is copied at no cost: no call, no
ledger row, ``reused_from`` naming the original, the original's resolved destinations kept.

Within one process, a question whose key another caller is asking right now waits for that
answer to be stored, then takes it (or, when it came back ungrounded or failed, asks itself):
two identical questions claimed together are asked once. Across processes a key may be asked
twice when two workers ask it at the same moment; the second answer is stored as usual.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

import anyio

from pipeline.clock import utcnow
from pipeline.gemini.wire import decode_response
from pipeline.grounding import avoiding, ground_answer
from pipeline.job.states import QuestionState
from pipeline.rows import AnswerRecord, ClaimedQuestion, StateChange
from pipeline.run.verdicts import Outcome
from pipeline.store.reuse import Reusable, reusable_answer

if TYPE_CHECKING:
    from pipeline.job.calls import CallPlan
    from pipeline.store.database import Database


class AnswerReuse:
    """One run's side of reuse: the stamps, the look-up, the keys being asked right now.

    ``within``: how old a reused answer may be (None: reuse is off; answers are only
    stamped); ``structuring``: a copied answer goes on to call 2, as an asked one does.
    """

    def __init__(
        self, db: Database, plan: CallPlan, within: dt.timedelta | None, *, structuring: bool
    ) -> None:
        self._db = db
        self._plan = plan
        self.within = within
        self._structuring = structuring
        self.settings = plan.settings
        self._asking: dict[str, anyio.Event] = {}

    def key(self, question: ClaimedQuestion) -> str:
        return self._plan.reuse_key(avoiding(question.text, question.avoid_domains), question.meta)

    def stamped(self, outcome: Outcome, key: str) -> Outcome:
        """``outcome``'s answer, if any, with the settings fingerprint and the reuse key."""
        if outcome.answer is not None:
            outcome.answer = dataclasses.replace(
                outcome.answer, settings=self.settings, reuse_key=key
            )
        return outcome

    async def find_or_hold(self, question: ClaimedQuestion, key: str) -> Outcome | None:
        """A copied answer for ``question``; or None, and the caller asks it, holding ``key``
        until :meth:`release` (a second caller with the same key waits for it)."""
        if self.within is None:
            return None
        while True:
            since = utcnow() - self.within
            found = await self._db.transaction(
                "looking for an answer to reuse",
                lambda c, since=since: reusable_answer(c, key, since),
            )
            if found is not None:
                return self._copied(question, key, found)
            asking = self._asking.get(key)
            if asking is None:
                self._asking[key] = anyio.Event()
                return None
            await asking.wait()

    def release(self, key: str) -> None:
        """The answer asked under ``key`` is stored (or was not given): waiters look again."""
        event = self._asking.pop(key, None)
        if event is not None:
            event.set()

    def _copied(self, question: ClaimedQuestion, key: str, found: Reusable) -> Outcome:
        raw = found.raw_response.encode()
        response = decode_response(raw)
        candidate = response.candidates[0]
        record = AnswerRecord(
            question_id=question.id,
            answer=ground_answer(candidate),
            response=response,
            finish_reason=candidate.finish_reason,
            raw_response=raw,
            latency_ms=0.0,
            version=question.answer_version + 1,
            settings=self.settings,
            reuse_key=key,
            reused_from=found.answer_id,
        )
        if self._structuring:  # call 2 follows at once, under our lease
            change = StateChange(
                question.id, QuestionState.RUNNING, question.attempts, keep_lease=True
            )
        else:
            change = StateChange(question.id, QuestionState.DONE, question.attempts)
        return Outcome(change, answer=record)
