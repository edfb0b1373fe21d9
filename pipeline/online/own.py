"""Call 1 through own retrieval: the job's index searched for the question, the passages
numbered in the prompt, the answer's citations constructed from the model's ``[n]`` markers
(``docs/retrieval.md``).

One question, one :class:`~pipeline.run.verdicts.Outcome`, as :mod:`pipeline.online.answering`
makes for the grounded call, with these differences:

* the search is a read of the job's own database (the index, :mod:`pipeline.retrieval`),
  fused with the nearest chunks to the question's vector under ``[retrieval] dense``
  (:mod:`pipeline.retrieval.query_vectors` embeds each question once);
  nothing at or above ``min_score``: the question ends ``ungrounded`` with error class
  ``nothing_relevant``, and no call is made (there is nothing to cite);
* the call declares no tool: the ledger's step is ``own``, with no grounding fee, and it is
  not counted in the day's grounded prompts (:class:`~pipeline.online.call.MeteredCaller`);
  the job's rate, budget and token limits apply as to any call;
* an answer with no valid marker is ``ungrounded`` at once (no recency nudge: the passages
  are what they are); a grounded one goes on to call 2 like a managed one, its sources of
  kind ``own`` (the documents' ``doc_id``, ``title``, ``uri``);
* a failed call is decided by the retry policy as call 1 is; its tries are the question's
  ``attempts``.

The answer is stored with ``route = "own"``; a question asked again later (call 2 after a
restart) has its citations rebuilt from the stored response and passages
(:func:`stored_own_answer`), exactly as they were made.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.errors import CallError
from pipeline.gemini.endpoint import Endpoint
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.calls import OWN_STEP, OwnRetrievalCall
from pipeline.job.states import QuestionState
from pipeline.limits.policy import RetryPolicy
from pipeline.online.call import ModelCaller, ledger_row
from pipeline.retrieval.answer import OwnRequest, own_request
from pipeline.retrieval.query_vectors import QueryEmbedder
from pipeline.rows import ClaimedQuestion
from pipeline.run.own_verdicts import (
    OwnReply,
    nothing_found,
    own_outcome,
    rebuild_own_answer,
    with_dense_note,
)
from pipeline.run.verdicts import Outcome, failure_verdict
from pipeline.store.answers import own_passages
from pipeline.store.database import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OwnAnswerer:
    """Answers questions through own retrieval, making the call through a MeteredCaller.

    ``endpoint``: the model's generateContent endpoint (the grounded call's); ``structuring``:
    call 2 follows a grounded answer (the caller keeps the lease for it).
    """

    caller: ModelCaller
    call: OwnRetrievalCall
    endpoint: Endpoint
    db: Database
    job_id: int
    policy: RetryPolicy
    structuring: bool
    queries: QueryEmbedder | None = None  # [retrieval] dense: the questions' vectors

    async def answer(self, question: ClaimedQuestion, *, attempts: int, version: int) -> Outcome:
        """Search, then call (unless nothing relevant was found); ``attempts``: the tries
        already spent on this step, ``version``: the answer version to store."""
        vector = await self.queries.vector(question.text) if self.queries is not None else None
        values = vector.values if vector is not None else None
        request = await self.db.read(
            "searching the job's index", lambda c: self._search(c, question, values)
        )
        if request is None:
            return nothing_found(question.id, question.text, attempts)
        request = with_dense_note(request, vector)
        attempts += 1
        try:
            return await self._call(question, request, attempts, version)
        except CallError as error:
            calls = [row] if (row := ledger_row(error)) is not None else []
            return failure_verdict(question.id, attempts, error, self.policy, calls=calls)

    async def _search(
        self,
        connection: AsyncConnection,
        question: ClaimedQuestion,
        vector: Sequence[float] | None,
    ) -> OwnRequest | None:
        call = self.call
        return await own_request(
            connection,
            self.job_id,
            question.text,
            call.builder,
            top_k=call.top_k,
            min_score=call.min_score,
            query_vector=vector,
        )

    async def _call(
        self, question: ClaimedQuestion, request: OwnRequest, attempts: int, version: int
    ) -> Outcome:
        metered = await self.caller.call(
            self.endpoint,
            request.body,
            model=self.call.model,
            question_id=question.id,
            step=OWN_STEP,
            tool=None,
        )
        result = metered.result
        # call 2 follows at once, in the same caller, under our lease
        after = QuestionState.RUNNING if self.structuring else QuestionState.DONE
        return own_outcome(
            OwnReply(question.id, result.response, result.raw, result.latency_ms),
            request,
            attempts=attempts,
            version=version,
            policy=self.policy,
            calls=[metered.record],
            grounded_state=after,
        )


async def stored_own_answer(db: Database, question: ClaimedQuestion) -> GroundedAnswer | None:
    """The question's latest stored answer, an own one, with its citations rebuilt from the
    stored response and passages; None when that answer is not an own one."""
    if question.answer_raw is None:
        return None
    stored = await db.read(
        "reading an own answer's passages",
        lambda c: own_passages(c, question.id, question.answer_version),
    )
    if stored is None:
        return None
    return rebuild_own_answer(question.answer_raw, stored)
