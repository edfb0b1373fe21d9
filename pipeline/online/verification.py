"""Making the verification calls: under the job's limits and budget, ledgered as step
``verify``.

Every call goes through the run's :class:`~pipeline.online.call.MeteredCaller` (the job's
shared rate, token grant and budget, held by the job's database for every process). Its
ledger row comes first, alone in the transaction that settles the budget's hold: a paid call
is in the ledger before anything of its answer is read. Then its answer is read (never
raising: an unreadable one is ``no_verdict`` for every pair, with the reason) and its verdicts
stored, naming that row; verdicts the database still refuses are logged in one line and the
call counted failed, the ledger row staying.
A refused call is asked again (up to ``[limits] max_attempts``, waiting at least what the
server asked); a budget that runs out, or credentials that fail, stop the check: what was
stored stays, and a rerun goes on from there.

With ``[limits] max_cost_per_question_usd``, a question whose spend (its ledger rows, read
before the check, plus its verification calls made since) has reached the cap gets no further
verification call: it is counted in :attr:`CheckResult.capped`, and the command says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.costs.cap import QuestionSpend
from pipeline.errors import CallError, RunFatalError
from pipeline.gemini.endpoint import Endpoint
from pipeline.online.call import MeteredCaller, ledger_row
from pipeline.rows import CallRecord, PairVerdict
from pipeline.store import citation_verdicts as store
from pipeline.store.database import Database
from pipeline.verify.parsing import read_verdicts
from pipeline.verify.requests import VerificationCall

__all__ = [
    "CheckResult",
    "Checker",
]

log = logging.getLogger(__name__)

VERIFY_STEP = "verify"  # the ledger's step for verification calls
BACKOFF_S = 0.5  # first wait before asking a refused call again, doubled each time
BACKOFF_MAX_S = 30.0


@dataclass(slots=True)
class CheckResult:
    calls: int = 0  # requests sent (failed ones included)
    checked: int = 0  # verification calls answered and stored
    failed: int = 0  # verification calls given up on
    spend_micro: int = 0
    stopped: str | None = None
    capped: set[int] = field(default_factory=set)  # questions past their cap: calls not made


@dataclass(slots=True)
class Checker:
    """Makes ``calls`` with ``caller`` and stores what comes back."""

    db: Database
    caller: MeteredCaller
    endpoint: Endpoint
    model: str
    job_id: int
    max_attempts: int
    # Each question's spend against max_cost_per_question_usd, by question id (none: no cap).
    spends: dict[int, QuestionSpend] = field(default_factory=dict)
    result: CheckResult = field(default_factory=CheckResult)

    async def run(self, calls: Sequence[VerificationCall], concurrency: int) -> CheckResult:
        send, receive = anyio.create_memory_object_stream[VerificationCall](concurrency)
        async with anyio.create_task_group() as group:
            for _ in range(max(1, concurrency)):
                group.start_soon(self._worker, receive.clone())
            receive.close()
            async with send:
                for call in calls:
                    if self.result.stopped is not None:
                        break
                    await send.send(call)
        return self.result

    async def _worker(self, calls: anyio.abc.ObjectReceiveStream[VerificationCall]) -> None:
        async with calls:
            async for call in calls:
                if self.result.stopped is None and not self._past_cap(call.question_id):
                    await self._check(call)

    def _past_cap(self, question_id: int) -> bool:
        """The question's spend has reached its cap: no verification call (counted)."""
        spend = self.spends.get(question_id)
        if spend is None or not spend.passed():
            return False
        self.result.capped.add(question_id)
        return True

    async def _check(self, call: VerificationCall) -> None:
        wait = BACKOFF_S
        for attempt in range(1, self.max_attempts + 1):
            try:
                metered = await self.caller.call(
                    self.endpoint,
                    call.body,
                    model=self.model,
                    question_id=call.question_id,
                    step=VERIFY_STEP,
                    # url_context has no fee and is no grounded prompt; what it reads is
                    # billed as input, so the budget holds the model's whole input window.
                    tool=None,
                    reads_pages=call.kind == "url",
                )
            except CallError as error:
                if (row := ledger_row(error)) is not None:
                    self.result.calls += 1
                    await self._store(call, row)
                if isinstance(error, RunFatalError):
                    self.result.stopped = error.message
                    return
                if not error.retryable or attempt == self.max_attempts:
                    self.result.failed += 1
                    log.warning("a verification call failed: %s", error.message)
                    return
                await anyio.sleep(max(wait, error.retry_delay or 0.0))
                wait = min(wait * 2, BACKOFF_MAX_S)
                continue
            self.result.calls += 1
            call_id = await self._store(call, metered.record)
            verdicts = read_verdicts(call, metered.result.response)
            if await self._store_verdicts(call, call_id, verdicts):
                self.result.checked += 1
            else:
                self.result.failed += 1
            return

    async def _store_verdicts(
        self, call: VerificationCall, call_id: int, verdicts: list[PairVerdict]
    ) -> bool:
        """The call's verdicts, after its ledger row; False when the database refused them."""
        now = utcnow()

        async def write(connection: AsyncConnection) -> None:
            await store.store_verdicts(
                connection,
                answer_id=call.answer_id,
                question_id=call.question_id,
                model=self.model,
                call_id=call_id,
                verdicts=verdicts,
                now=now,
            )

        try:
            await self.db.transaction("storing citation verdicts", write)
        except DBAPIError as exc:  # its ledger row is stored: the pairs stay unchecked
            log.warning(
                "the verdicts of a verification call were not stored: %s",
                type(exc.orig).__name__ if exc.orig is not None else type(exc).__name__,
            )
            return False
        return True

    async def _store(self, call: VerificationCall, record: CallRecord) -> int:
        """The call's ledger row, with the budget settled: its id."""
        limits = self.caller.limits
        self.result.spend_micro += max(record.cost_micro_usd, 0)
        if (spend := self.spends.get(call.question_id)) is not None:
            spend.add((record,))

        async def write(connection: AsyncConnection) -> int:
            call_id = await store.store_call(connection, record)
            await limits.settle(
                connection, released=record.reserved_micro, spent=record.cost_micro_usd
            )
            return call_id

        return await self.db.transaction("storing a verification call", write)
