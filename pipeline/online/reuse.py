"""Repeated questions in an online run: answered once, reused after (``[job]
reuse_answers_within``).

Every managed call-1 answer is stamped with the call's settings fingerprint and its reuse key
(:meth:`pipeline.job.calls.CallPlan.reuse_key`), whether reuse is on or not, so that turning
it on later finds the answers already paid for. With reuse on, a question about to be asked
first looks for a grounded answer stored under its key within the window, in any job of the
database (:mod:`pipeline.store.answers`); found, the answer is copied at no cost: no call, no
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
from pipeline.gemini.interactions_map import decode_any_response
from pipeline.grounding.mapping import ground_answer
from pipeline.grounding.policy import avoiding
from pipeline.job.states import QuestionState
from pipeline.rows import AnswerRecord, ClaimedQuestion, StateChange
from pipeline.run.verdicts import Outcome
from pipeline.store.answers import Reusable, reusable_answer

if TYPE_CHECKING:
    from pipeline.job.calls import CallPlan
    from pipeline.store.database import Database


class KeyHold:
    """The right to ask one reuse key in this process, until :meth:`release`."""

    def __init__(self, key: str, asking: dict[str, anyio.Event]) -> None:
        self.key = key
        self._asking = asking
        self._done = anyio.Event()
        asking[key] = self._done

    def release(self) -> None:
        """The answer asked under the key is stored (or was not given): waiters look again.
        Releasing twice is harmless; it never lets go of a hold taken by another caller."""
        if self._asking.get(self.key) is self._done:
            del self._asking[self.key]
        self._done.set()


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

    async def find_or_hold(self, question: ClaimedQuestion, key: str) -> Outcome | KeyHold:
        """A copied answer for ``question``; or the hold on ``key``, and the caller asks it,
        until :meth:`KeyHold.release` (a second caller with the same key waits for it)."""
        if self.within is None:
            return KeyHold(key, {})
        # Wait out whoever asks ``key`` now, then hold it *before* looking: a look that began
        # before another caller's answer was committed would miss it, and ask again.
        while (asking := self._asking.get(key)) is not None:
            await asking.wait()
        hold = KeyHold(key, self._asking)
        since = utcnow() - self.within
        try:
            found = await self._db.transaction(
                "looking for an answer to reuse",
                lambda c: reusable_answer(c, key, since),
            )
        except BaseException:
            hold.release()
            raise
        if found is None:
            return hold
        hold.release()
        return self._copied(question, key, found)

    def _copied(self, question: ClaimedQuestion, key: str, found: Reusable) -> Outcome:
        raw = found.raw_response.encode()
        response = decode_any_response(raw)
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
