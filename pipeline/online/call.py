"""One model call under the account's limits and the job's budget, and what it cost.

A call returns a :class:`Metered` (the result and its ledger row) or raises a
:class:`~pipeline.errors.CallError`; a failure whose request reached the server carries its
ledger row (at cost 0) in ``error.record``.

Before a call, in this order: the budget reserves the call's worst case (refused: the call is
not made, :class:`~pipeline.errors.BudgetExhausted`); a grounded call is not made while the
daily grounding bucket is known to be empty (:class:`~pipeline.errors.GroundingPaused`, with
the reset time); the rate limiter spaces the
request (no burst above the rate, lowered by AIMD on 429s); the token limiter reserves the
prompt's estimated tokens. After it: the token estimate is corrected from ``usageMetadata``,
the cost computed from the price table and settled against the budget, and a
:class:`~pipeline.store.ledger.CallRecord` made for the ledger (failed calls too, at cost 0).

Given a :class:`~pipeline.limits.job_limits.SharedLimits` (what ``ground run`` does), the rate, the
adaptive response to 429s, the token limit, the daily count and the budget are drawn from the
job's database, so every process working on the job keeps to the job's limits together; the
budget's reservation is then settled by the writer, with the ledger row (``record.reserved_micro``).
Without one (unit tests, tools), all state lives in this process.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
import warnings
from dataclasses import dataclass
from decimal import Decimal
from typing import NamedTuple

import anyio

from pipeline.clock import utcnow
from pipeline.costs.charges import Budget, call_cost, worst_case_cost
from pipeline.costs.prices import Price, PriceTable, UnconfirmedPriceWarning, load_prices
from pipeline.errors import BudgetExhausted, GroundingPaused
from pipeline.gemini.api_errors import GeminiError, Unreachable, classify_429
from pipeline.gemini.client import CallResult, GeminiClient
from pipeline.gemini.endpoint import Endpoint
from pipeline.job.spec import JobSpec
from pipeline.limits import (
    AdaptiveRate,
    DailyGroundingGate,
    RateLimiter,
    TokenBudgetLimiter,
    TokenReservation,
    estimate_tokens,
    pacing_rate,
)
from pipeline.limits.daily import DAILY_RESET_MARGIN
from pipeline.limits.job_limits import SharedLimits
from pipeline.store.ledger import CallRecord, micro_to_usd

log = logging.getLogger(__name__)


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
    """Makes calls for one run; one instance shared by every caller task."""

    def __init__(
        self,
        spec: JobSpec,
        client: GeminiClient,
        *,
        spent: Decimal = Decimal(0),
        prices: PriceTable | None = None,
        shared: SharedLimits | None = None,
    ) -> None:
        limits = spec.limits
        self.shared = shared
        self.spec = spec
        self.client = client
        with warnings.catch_warnings():  # only the rows this job uses are worth a warning
            warnings.simplefilter("ignore", UnconfirmedPriceWarning)
            self.prices = prices or load_prices(limits.prices_file or None)
        rate = pacing_rate(limits.requests_per_minute, headroom=limits.pacing_headroom)
        self.limiter = RateLimiter(rate)
        self.aimd: AdaptiveRate | None = None
        self.tokens: TokenBudgetLimiter | None = None
        self.budget: Budget | None = None
        if shared is not None:  # the database holds these, for every process of the job
            self.gate = DailyGroundingGate(None)
        else:
            self.aimd = AdaptiveRate(rate, limiter=self.limiter) if limits.adaptive else None
            if limits.tokens_per_minute:
                self.tokens = TokenBudgetLimiter(limits.tokens_per_minute)
            self.gate = DailyGroundingGate(limits.grounded_prompts_per_day or None)
            if spec.budget is not None:
                self.budget = Budget(spec.budget, spent=spent)
        self._price_cache: dict[str, Price | None] = {}

    @property
    def sending_rate(self) -> float:
        """Requests a second this run sends at now: the job's shared (adaptive) rate when the
        limits live in the database, else this process's."""
        if self.shared is not None:
            return self.shared.requests.rate
        return self.aimd.rate if self.aimd is not None else self.limiter.rate

    def price_for(self, model: str) -> Price | None:
        if model not in self._price_cache:
            price = self.prices.for_model(model, self.spec.model.backend)
            self._price_cache[model] = price
            if price is None:
                log.warning(
                    "no price for %s (%s): its calls are recorded at cost 0, marked incomplete",
                    model,
                    self.spec.model.backend,
                    extra={"action": "price_missing", "model": model},
                )
            elif not price.confirmed_for(self.spec.grounding.tools):
                log.warning(
                    "the price of %s rests on placeholder figures: %s",
                    model,
                    price.describe(),
                    extra={"action": "price_unconfirmed", "model": model},
                )
        return self._price_cache[model]

    async def call(
        self,
        endpoint: Endpoint,
        body: bytes,
        *,
        model: str,
        question_id: int,
        step: str,
        tool: str | None,
    ) -> Metered:
        """Make one call. ``tool`` is the grounding tool declared (None for call 2).

        Raises a :class:`~pipeline.errors.CallError`: :class:`BudgetExhausted` or
        :class:`GroundingPaused` before any request, :class:`Unreachable` when no request could
        be sent, and the API's error (its ledger row in ``record``) when the server refused.
        """
        price = self.price_for(model)
        # The whole body, not only the prompt: system instruction, schema and source list
        # are input too, and the JSON around them only makes the estimate err high.
        estimate = estimate_tokens(body.decode())
        if self.shared is not None:
            head = _Head(question_id, step, model, started_at=utcnow())
            return await self._call_shared(self.shared, endpoint, body, head, price, estimate, tool)
        worst = self._reserve(price, model, estimate, tool)
        if tool is not None:
            self._pass_gate(worst)
        await self.limiter.acquire()
        reservation: TokenReservation | None = None
        if self.tokens is not None:
            reservation = await self.tokens.acquire(min(estimate, self.tokens.limit))
        started_at, started = utcnow(), time.perf_counter()
        try:
            result = await self.client.generate(endpoint, body)
        except GeminiError as error:
            self._settle(worst, None, reservation, 0)
            if isinstance(error, Unreachable):  # nothing was sent: no ledger row
                raise
            latency_ms = (time.perf_counter() - started) * 1000.0
            error.record = CallRecord(
                question_id,
                step,
                model,
                started_at,
                latency_ms,
                error.http_status,
                error.error_class,
            )
            self._on_error(error, tool)
            raise
        head = _Head(question_id, step, model, started_at)
        return Metered(result, self._record(head, result, price, tool, worst, reservation))

    async def _call_shared(
        self,
        shared: SharedLimits,
        endpoint: Endpoint,
        body: bytes,
        head: _Head,
        price: Price | None,
        estimate: int,
        tool: str | None,
    ) -> Metered:
        """:meth:`call` with the limits and the budget drawn from the job's database."""
        worst = await self._reserve_shared(shared, price, head.model, estimate, tool)
        taken = 0
        try:
            if tool is not None:
                await self._pass_shared_gate(shared)
            await shared.requests.acquire()
            if shared.tokens is not None:
                taken = await shared.tokens.acquire(estimate)
        except BaseException:  # not sent: the reservation goes back at once
            with anyio.CancelScope(shield=True):
                await shared.release(worst)
            raise
        started_at, started = utcnow(), time.perf_counter()
        head = head._replace(started_at=started_at)
        try:
            result = await self.client.generate(endpoint, body)
        except GeminiError as error:
            if shared.tokens is not None:
                shared.tokens.reconcile(taken, 0)
            if isinstance(error, Unreachable):  # nothing was sent: no ledger row to settle it
                await shared.release(worst)
                raise
            latency_ms = (time.perf_counter() - started) * 1000.0
            error.record = CallRecord(
                *head, latency_ms, error.http_status, error.error_class, reserved_micro=worst
            )
            await self._on_shared_error(shared, error, tool)
            raise
        except BaseException:  # cancelled mid-call: no ledger row will settle it
            with anyio.CancelScope(shield=True):
                await shared.release(worst)
            raise
        if shared.tokens is not None:
            shared.tokens.reconcile(taken, result.response.usage_metadata.prompt_token_count)
        if self.spec.limits.adaptive:
            await shared.requests.on_success()
        record = self._record(head, result, price, tool, None, None)
        return Metered(result, dataclasses.replace(record, reserved_micro=worst))

    async def _reserve_shared(
        self, shared: SharedLimits, price: Price | None, model: str, estimate: int, tool: str | None
    ) -> int:
        """Reserve the call's worst case in the job's budget row; micro-dollars held."""
        if self.spec.budget is None:
            return 0
        worst = self._worst(price, model, estimate, tool)
        micro = int(worst * 1_000_000)
        if not await shared.reserve(micro):
            raise BudgetExhausted(await shared.budget_message(micro))
        return micro

    async def _pass_shared_gate(self, shared: SharedLimits) -> None:
        """Count a grounded prompt in the job's daily row, or raise GroundingPaused."""
        if self.gate.paused_until is None and shared.daily is not None:
            resets_at = await shared.daily.take()
            if resets_at is not None:
                self.gate.pause_until(
                    dt.datetime.fromtimestamp(resets_at, dt.UTC) + DAILY_RESET_MARGIN,
                    f"the configured grounded_prompts_per_day"
                    f" ({self.spec.limits.grounded_prompts_per_day}) is used up",
                )
        paused_until = self.gate.paused_until
        if paused_until is not None:
            raise GroundingPaused(paused_until, self.gate.message())

    async def _on_shared_error(
        self, shared: SharedLimits, error: GeminiError, tool: str | None
    ) -> None:
        """A rate 429 lowers every process's rate (the row's); the rest as :meth:`_on_error`."""
        if error.http_status == 429 and self.spec.limits.adaptive:
            backend = self.spec.model.backend
            kind = classify_429(error.body, grounded=tool is not None, backend=backend)
            if kind not in ("daily_grounding", "daily") and await shared.requests.on_throttle():
                log.info(
                    "429: the job's shared sending rate lowered to %.1f/s",
                    shared.requests.rate,
                    extra={"action": "rate_lowered", "rate": shared.requests.rate},
                )
        self._on_error(error, tool)

    def _pass_gate(self, worst: Decimal | None) -> None:
        """Count a grounded prompt, or raise GroundingPaused when the daily bucket is empty."""
        if self.gate.paused_until is not None:
            self._release(worst)
            raise GroundingPaused(self.gate.paused_until, self.gate.message())
        # Counted when sent: the daily bucket counts requests that declare grounding.
        self.gate.record_grounded()

    def _record(
        self,
        head: _Head,
        result: CallResult,
        price: Price | None,
        tool: str | None,
        worst: Decimal | None,
        reservation: TokenReservation | None,
    ) -> CallRecord:
        """Settle a successful call (AIMD, budget, tokens) and make its ledger row."""
        response = result.response
        usage = response.usage_metadata
        if self.aimd is not None:
            self.aimd.on_success()
        grounding = response.candidates[0].grounding_metadata if response.candidates else None
        cost = call_cost(price, usage, grounding, tool=tool) if price is not None else None
        # The budget counts what the ledger stores (micro-dollars, rounded up), so the spend
        # `ground status` sums is the spend the budget was held to.
        actual = micro_to_usd(cost.micro_usd()) if cost is not None else None
        self._settle(worst, actual, reservation, usage.prompt_token_count)
        return CallRecord.answered(*head, result.latency_ms, usage, cost)

    def _reserve(
        self, price: Price | None, model: str, estimate: int, tool: str | None
    ) -> Decimal | None:
        if self.budget is None:
            return None
        worst = self._worst(price, model, estimate, tool)
        if not self.budget.reserve(worst):
            raise BudgetExhausted(self.budget.message(worst))
        return worst

    def _worst(self, price: Price | None, model: str, estimate: int, tool: str | None) -> Decimal:
        """The call's worst case, rounded up to micro-dollars like the stored actual cost."""
        if price is None:
            raise BudgetExhausted(
                f"no price is known for {model!r} ({self.spec.model.backend}), so a budget "
                "cannot be enforced: add a row to the prices file (limits.prices_file)"
            )
        limits = self.spec.limits
        worst_cost = worst_case_cost(
            price,
            prompt_tokens_estimate=estimate,
            max_output_tokens=limits.max_output_tokens,
            max_search_queries=limits.max_search_queries,
            max_tool_use_tokens=limits.max_tool_use_tokens if tool is not None else 0,
            tool=tool,
        )
        return micro_to_usd(worst_cost.micro_usd())

    def _release(self, worst: Decimal | None) -> None:
        if self.budget is not None and worst is not None:
            self.budget.release(worst)

    def _settle(
        self,
        worst: Decimal | None,
        actual: Decimal | None,
        reservation: TokenReservation | None,
        tokens: int,
    ) -> None:
        if self.budget is not None and worst is not None:
            self.budget.settle(worst, actual if actual is not None else Decimal(0))
        if self.tokens is not None and reservation is not None:
            self.tokens.reconcile(reservation, tokens)

    def _on_error(self, error: GeminiError, tool: str | None) -> None:
        """Learn from a refused call: a 429 lowers the rate or pauses for the day. A grounded
        call refused while the daily bucket is empty raises GroundingPaused (from ``error``,
        with its ledger row): it waits for the reset rather than spending an attempt."""
        if error.http_status != 429:
            return
        kind = classify_429(error.body, grounded=tool is not None, backend=self.spec.model.backend)
        if kind in ("daily_grounding", "daily"):
            until = self.gate.pause_for_day(f"the daily {kind.replace('_', ' ')} quota ran out")
            log.warning(
                "daily quota exhausted: grounded calls paused until %s",
                until.isoformat(),
                extra={"action": "grounding_paused", "until": until.isoformat()},
            )
        elif self.aimd is not None and self.aimd.on_throttle():
            log.info(
                "429: sending rate lowered to %.1f/s",
                self.aimd.rate,
                extra={"action": "rate_lowered", "rate": self.aimd.rate},
            )
        paused_until = self.gate.paused_until
        if tool is not None and paused_until is not None:
            paused = GroundingPaused(paused_until, self.gate.message())
            paused.record = error.record
            raise paused from error
