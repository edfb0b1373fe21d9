"""One model call under the job's limits and budget, and what it cost.

A call returns a :class:`Metered` (the result and its ledger row) or raises a
:class:`~pipeline.errors.CallError`; a failure whose request reached the server carries its
ledger row (at cost 0) in ``error.record``.

The limits are the job's, drawn from its database by every process working on it
(:class:`~pipeline.limits.JobLimits`). Before a call, in this order: the budget reserves the
call's worst case (refused: the call is not made, :class:`~pipeline.errors.BudgetExhausted`);
a grounded call counts in the day's grounded prompts, and is not made while the daily bucket
is known to be empty (:class:`~pipeline.errors.GroundingPaused`, with the reset time); the
request waits for its slot of the shared rate; the token grant takes the prompt's estimated
tokens. A run that stops while the call waits for any of these sends nothing:
:class:`~pipeline.errors.NotSent`, with the reservation, the tokens and the day's prompt given
back (:mod:`pipeline.limits.interrupt`); nor does a call whose question's lease is no longer
this process's, checked against the clock as the call starts and again just before the
request leaves (:class:`~pipeline.errors.LeaseLost`, :mod:`pipeline.online.fence`). After it:
the token estimate is corrected from ``usageMetadata``, the cost computed from the price
table, and a :class:`~pipeline.store.ledger.CallRecord` made for the ledger (failed calls
too, at cost 0; an answer whose usage cannot be priced,
:class:`~pipeline.gemini.api_errors.InvalidUsage`, at the call's worst case: it was paid);
the budget's reservation is settled by the writer, with the ledger row
(``record.reserved_micro``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import anyio

from pipeline.clock import utcnow
from pipeline.costs.charges import WorstCase, call_cost
from pipeline.costs.prices import Price
from pipeline.errors import BudgetExhausted, GroundingPaused
from pipeline.gemini.api_errors import GeminiError, InvalidUsage, Unreachable, classify_429
from pipeline.gemini.client import CallResult, GeminiClient
from pipeline.gemini.endpoint import Endpoint
from pipeline.limits import GroundingPause, JobLimits, estimate_tokens
from pipeline.limits.daily import DAILY_RESET_MARGIN
from pipeline.online.fence import LeaseFence
from pipeline.run.context import RunPrices
from pipeline.store.ledger import CallRecord
from pipeline.store.reconnect import DatabaseOutage

log = logging.getLogger(__name__)

T = TypeVar("T")

PERMITS = ("budget", "daily", "rate", "tokens")  # what a call waits for before it is sent


class _Head(NamedTuple):
    """The first fields of a call's ledger row."""

    question_id: int
    step: str
    model: str
    started_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Metered:
    """A successful call's result and its ledger row."""

    result: CallResult
    record: CallRecord


class MeteredCaller:
    """Makes calls for one run; one instance shared by every caller task.

    ``worst_case``: the bounds a call's budget reservation is computed under; ``adaptive``:
    whether 429s lower (and successes raise) the job's shared rate; ``backend``: what a 429's
    body is read as; ``fence``: the leases this process holds (None: calls are not fenced).
    """

    def __init__(
        self,
        client: GeminiClient,
        limits: JobLimits,
        prices: RunPrices,
        *,
        worst_case: WorstCase,
        adaptive: bool,
        backend: str,
        fence: LeaseFence | None = None,
    ) -> None:
        self.client = client
        self.fence = fence
        self.limits = limits
        self.prices = prices
        self.pause = GroundingPause()
        self._worst_case = worst_case
        self._adaptive = adaptive
        self._backend = backend
        # Callers waiting now, by permit: "budget", "daily", "rate", "tokens" (what a run
        # that makes no progress says it waits for: pipeline.watch.progress.stall_reason).
        self.waiting: dict[str, int] = dict.fromkeys(PERMITS, 0)
        self.sent = 0  # requests this process has sent (or begun to send)
        self.on_wire = 0  # ... of them, those whose response is not in yet

    @property
    def sending_rate(self) -> float:
        """Requests a second the job's processes send at now (the shared, adaptive rate)."""
        return self.limits.requests.rate

    async def call(
        self,
        endpoint: Endpoint,
        body: bytes,
        *,
        model: str,
        question_id: int,
        step: str,
        tool: str | tuple[str, ...] | None,
    ) -> Metered:
        """Make one call. ``tool`` is the grounding tool declared (None for call 2).

        Raises a :class:`~pipeline.errors.CallError`: :class:`BudgetExhausted`,
        :class:`GroundingPaused` or :class:`~pipeline.errors.NotSent` (the run stopped while
        the call waited for a permit; :class:`~pipeline.errors.LeaseLost`: the question's
        lease ran out) before any request, :class:`Unreachable` when no request could
        be sent, and the API's error (its ledger row in ``record``) when the server refused.
        """
        limits = self.limits
        stop = limits.interrupt
        stop.check()
        fence = self.fence
        if fence is not None:
            fence.check(question_id)
        price = self.prices.online(model)
        # The whole body, not only the prompt: system instruction, schema and source list
        # are input too, and the JSON around them only makes the estimate err high.
        estimate = estimate_tokens(body.decode())
        worst = await self._waiting_for("budget", self._reserve(price, model, estimate, tool))
        taken = 0
        counted = False  # a grounded prompt counted in the day's row
        try:
            if tool is not None:
                await self._waiting_for("daily", self._pass_daily(limits))
                counted = limits.daily is not None
            await self._waiting_for("rate", limits.requests.acquire())
            if limits.tokens is not None:
                taken = await self._waiting_for("tokens", limits.tokens.acquire(estimate))
            # An access token first: a credentials failure sends nothing and stops the run.
            await endpoint.auth.headers()
            stop.check()  # the run stopped while this call waited: it is not sent
            if fence is not None:  # ... or the process slept past the question's lease
                fence.check(question_id)
        except BaseException:  # not sent: the reservation, tokens and prompt go back at once
            if taken and limits.tokens is not None:
                limits.tokens.reconcile(taken, 0)
            if counted and limits.daily is not None:
                limits.daily.untake()
            with anyio.CancelScope(shield=True):
                await limits.release(worst)
            raise
        head = _Head(question_id, step, model, utcnow())
        started = time.perf_counter()
        self.sent += 1
        self.on_wire += 1
        try:
            result = await self.client.generate(endpoint, body)
        except GeminiError as error:
            if limits.tokens is not None:
                limits.tokens.reconcile(taken, 0)
            if isinstance(error, Unreachable):  # nothing was sent: no ledger row to settle it
                await limits.release(worst)
                raise
            latency_ms = (time.perf_counter() - started) * 1000.0
            paid = 0  # a refused call is not billed ...
            if isinstance(error, InvalidUsage):  # ... one answered with unpriceable usage is
                paid = worst or self._worst_micro(price, estimate, tool)
            error.record = CallRecord(
                *head,
                latency_ms,
                error.http_status,
                error.error_class,
                cost_micro_usd=paid,
                cost_complete=price is not None or not isinstance(error, InvalidUsage),
                reserved_micro=worst,
            )
            await self._on_error(error, tool)
            raise
        except BaseException:  # cancelled mid-call: no ledger row will settle it
            with anyio.CancelScope(shield=True):
                await limits.release(worst)
            raise
        finally:
            self.on_wire -= 1
        usage = result.response.usage_metadata
        if limits.tokens is not None:
            limits.tokens.reconcile(taken, usage.prompt_token_count)
        if self._adaptive:
            try:
                await limits.requests.on_success()
            except DatabaseOutage:  # paid: the response goes on to the writer (or the spill)
                log.debug("the shared rate could not be raised", extra={"action": "rate_kept"})
        response = result.response
        grounding = response.candidates[0].grounding_metadata if response.candidates else None
        cost = call_cost(price, usage, grounding, tool=tool) if price is not None else None
        record = CallRecord.answered(*head, result.latency_ms, usage, cost)
        return Metered(result, dataclasses.replace(record, reserved_micro=worst))

    async def _waiting_for(self, permit: str, wait: Awaitable[T]) -> T:
        """``wait``, counted in ``waiting[permit]`` while it lasts."""
        self.waiting[permit] += 1
        try:
            return await wait
        finally:
            self.waiting[permit] -= 1

    async def _reserve(
        self, price: Price | None, model: str, estimate: int, tool: str | tuple[str, ...] | None
    ) -> int:
        """Reserve the call's worst case in the job's budget row; micro-dollars held."""
        if self.limits.budget_micro is None:
            return 0
        if price is None:
            raise BudgetExhausted(
                f"no price is known for {model!r} ({self._backend}), so a budget cannot be"
                " enforced: add a row to the prices file (limits.prices_file)"
            )
        worst = self._worst_micro(price, estimate, tool)
        if not await self.limits.reserve(worst):
            raise BudgetExhausted(await self.limits.budget_message(worst))
        return worst

    def _worst_micro(
        self, price: Price | None, estimate: int, tool: str | tuple[str, ...] | None
    ) -> int:
        """The most the call may cost, in micro-dollars (0 with no price known)."""
        return self._worst_case.micro(price, estimate, tool) if price is not None else 0

    async def _pass_daily(self, limits: JobLimits) -> None:
        """Count a grounded prompt in the job's daily row, or raise GroundingPaused."""
        if self.pause.paused_until is None and limits.daily is not None:
            resets_at = await limits.daily.take()
            if resets_at is not None:
                self.pause.pause_until(
                    dt.datetime.fromtimestamp(resets_at, dt.UTC) + DAILY_RESET_MARGIN,
                    f"the configured grounded_prompts_per_day ({limits.grounded_per_day})"
                    " is used up",
                )
        paused_until = self.pause.paused_until
        if paused_until is not None:
            raise GroundingPaused(paused_until, self.pause.message())

    async def _on_error(self, error: GeminiError, tool: str | tuple[str, ...] | None) -> None:
        """Learn from a refused call: a rate 429 lowers every process's rate (the row's); a
        daily 429 pauses grounded calls for the day. A grounded call refused while the daily
        bucket is empty raises GroundingPaused (from ``error``, with its ledger row): it waits
        for the reset rather than spending an attempt."""
        if error.http_status != 429:
            return
        kind = classify_429(error.body, grounded=tool is not None, backend=self._backend)
        requests = self.limits.requests
        if kind in ("daily_grounding", "daily"):
            until = self.pause.pause_for_day(f"the daily {kind.replace('_', ' ')} quota ran out")
            log.warning(
                "daily quota exhausted: grounded calls paused until %s",
                until.isoformat(),
                extra={"action": "grounding_paused", "until": until.isoformat()},
            )
        elif self._adaptive and await requests.on_throttle():
            log.info(
                "429: the job's shared sending rate lowered to %.1f/s",
                requests.rate,
                extra={"action": "rate_lowered", "rate": requests.rate},
            )
        paused_until = self.pause.paused_until
        if tool is not None and paused_until is not None:
            paused = GroundingPaused(paused_until, self.pause.message())
            paused.record = error.record
            raise paused from error
