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
tokens. While bare 429s on grounded calls are probed (:class:`~pipeline.limits.DailyProbe`),
a grounded call other than the probe is held (GroundingPaused, until the next probe). A run
that stops while the call waits for any of these sends nothing:
:class:`~pipeline.errors.NotSent`, with the reservation, the tokens and the day's prompt given
back (:mod:`pipeline.limits.interrupt`); nor does a call whose question's lease is no longer
this process's, checked against the clock as the call starts and again just before the
request leaves (:class:`~pipeline.errors.LeaseLost`, :mod:`pipeline.online.fence`), and in
the database by the call's wire mark, made before the rate slot, which keeps the question this
process's until the call can no longer be answered (:mod:`pipeline.online.wire`). After it:
the token estimate is corrected from ``usageMetadata``, the cost computed from the price
table, and a :class:`~pipeline.rows.CallRecord` made for the ledger (failed calls
too, at cost 0; an answer whose usage cannot be priced,
:class:`~pipeline.gemini.api_errors.InvalidUsage`, at the call's worst case: it was paid);
the budget's reservation is settled by the writer, with the ledger row
(``record.reserved_micro``). A refusal for capacity is raised as what the retry policy waits
out without spending an attempt: a 503 as :class:`~pipeline.errors.Overloaded`, a 429 that
names no day as :class:`~pipeline.errors.Throttled` (each model's storm of them counted in
:class:`~pipeline.limits.Storms`), the server's ``Retry-After`` and ``RetryInfo`` a floor of
the wait.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

import anyio

from pipeline.clock import utcnow
from pipeline.costs.charges import WorstCase, call_cost
from pipeline.costs.labels import with_labels
from pipeline.costs.prices import Price
from pipeline.errors import BudgetExhausted, CallError, GroundingPaused, Overloaded, Throttled
from pipeline.gemini.api_errors import (
    GeminiError,
    InvalidUsage,
    QuotaKind,
    Unreachable,
    classify_429,
)
from pipeline.gemini.client import CallResult, GeminiClient
from pipeline.gemini.endpoint import Endpoint
from pipeline.gemini.tokens import estimate_tokens
from pipeline.limits.daily import DAILY_RESET_MARGIN, GroundingPause
from pipeline.limits.job_limits import JobLimits
from pipeline.limits.overload import Storms
from pipeline.limits.probe import DailyProbe, ProbeSettings
from pipeline.limits.retry_after import server_delay
from pipeline.online.fence import LeaseFence
from pipeline.online.wire import WireMark
from pipeline.rows import CallRecord
from pipeline.run.context import RunPrices
from pipeline.store.database import DatabaseOutage

__all__ = [
    "MeteredCaller",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

PERMITS = ("budget", "daily", "rate", "tokens")  # what a call waits for before it is sent
OVERLOADED_HTTP = 503  # the model is overloaded: waited out, no attempt spent
# Why grounded calls pause for the day, by what a 429's body named (classify_429's kinds).
_DAY_REASONS: dict[QuotaKind, str] = {
    "daily_grounding": "the daily grounding quota ran out (the 429 names it)",
    "daily": "a per-day quota of the model ran out (the 429 names it)",
}


class _Head(NamedTuple):
    """The first fields of a call's ledger row."""

    question_id: int
    step: str
    model: str
    started_at: dt.datetime


@dataclass(slots=True)
class _Held:
    """What one call holds on its way out: its price and token estimate, the tool it
    declares, its budget reservation (micro-dollars), the tokens taken, whether a grounded
    prompt was counted in the day's row, its number as the daily probe, and its credentials."""

    price: Price | None
    estimate: int
    tool: str | tuple[str, ...] | None
    worst: int
    taken: int = 0
    counted: bool = False
    probe: int | None = None
    credentials: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Metered:
    """A successful call's result and its ledger row."""

    result: CallResult
    record: CallRecord


class ModelCaller(Protocol):
    """What makes a model call for a question: :class:`MeteredCaller` in a run (under the job's
    limits and budget), a stand-in in tests. Returns the result and its ledger row, or raises
    a :class:`~pipeline.errors.CallError` (see :meth:`MeteredCaller.call`)."""

    async def call(
        self,
        endpoint: Endpoint,
        body: bytes,
        *,
        model: str,
        question_id: int,
        step: str,
        tool: str | tuple[str, ...] | None,
    ) -> Metered: ...


class MeteredCaller:
    """Makes calls for one run; one instance shared by every caller task.

    ``worst_case``: the bounds a call's budget reservation is computed under; ``adaptive``:
    whether 429s lower (and successes raise) the job's shared rate; ``backend``: what a 429's
    body is read as; ``fence``: the leases this process holds (None: calls are not fenced);
    ``wire``: marks each call's question as on the wire in the database before it is sent;
    ``daily_probe``: how long bare 429s on grounded calls must persist before grounding pauses
    for the day.
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
        wire: WireMark | None = None,
        daily_probe: ProbeSettings | None = None,
        labels: Mapping[str, str] | None = None,
        billed_queries: Mapping[str, float] | None = None,
    ) -> None:
        self.client = client
        # Vertex only: the run's billing labels, ground_step added per call (costs.labels).
        self._labels = dict(labels) if labels is not None and backend == "vertex" else None
        # Each model's billed search queries per grounded response, as the invoice taught
        # (store.ledger.billing_factors): a grounded response costs at least that many.
        self._billed_queries = dict(billed_queries or {})
        self.fence = fence
        self.wire = wire
        self.limits = limits
        self.prices = prices
        self.pause = GroundingPause()
        self.probe = DailyProbe(daily_probe)  # bare 429s on grounded calls, before a day's pause
        self.storms = Storms()  # each model's 503s and 429s since its last answer
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
        reads_pages: bool = False,
    ) -> Metered:
        """Make one call. ``tool`` is the grounding tool declared (None for call 2);
        ``reads_pages``: the request declares a tool that reads pages of no known size
        (``url_context`` in verification), so its reservation is the model's whole input
        window (:meth:`~pipeline.costs.charges.WorstCase.reading_micro`).

        Raises a :class:`~pipeline.errors.CallError`: :class:`BudgetExhausted`,
        :class:`GroundingPaused` (the day is paused, or a bare 429 is being probed) or
        :class:`~pipeline.errors.NotSent` (the run stopped while the call waited for a permit;
        :class:`~pipeline.errors.LeaseLost`: the question's lease ran out) before any request,
        :class:`Unreachable` when no request could be sent; when the server refused,
        :class:`Overloaded` (503), :class:`Throttled` or :class:`GroundingPaused`
        (429, see :meth:`_on_error`), or the API's error, each with its ledger row in
        ``record``.
        """
        limits = self.limits
        limits.interrupt.check()
        if self.fence is not None:
            self.fence.check(question_id)
        if self._labels is not None:
            body = with_labels(body, self._labels, step)
        price = self.prices.online(model)
        # The whole body, not only the prompt: system instruction, schema and source list
        # are input too, and the JSON around them only makes the estimate err high.
        estimate = estimate_tokens(body.decode())
        reserve = self._reserve(price, model, estimate, tool, reads_pages=reads_pages)
        worst = await self._waiting_for("budget", reserve)
        held = _Held(price, estimate, tool, worst)
        await self._permits(endpoint, held, question_id)
        head = _Head(question_id, step, model, utcnow())
        result = await self._request(endpoint, body, head, held)
        return await self._answered(result, head, held)

    async def _permits(self, endpoint: Endpoint, held: _Held, question_id: int) -> None:
        """Wait for the call's permits after its budget, in order (the day's grounded
        prompts, the rate, the tokens), then its credentials, counted in ``held``. A stop or
        a lost lease meanwhile sends nothing: what is held goes back at once."""
        limits = self.limits
        try:
            if held.tool is not None:
                held.probe = await self._waiting_for("daily", self._pass_daily(limits))
                held.counted = limits.daily is not None
            if self.wire is not None:  # on the wire from here: nobody asks it again meanwhile
                await self.wire.mark(question_id)
            await self._waiting_for("rate", limits.requests.acquire())
            if limits.tokens is not None:
                held.taken = await self._waiting_for("tokens", limits.tokens.acquire(held.estimate))
            # An access token first: a credentials failure sends nothing and stops the run.
            held.credentials = await endpoint.auth.headers()
            limits.interrupt.check()  # the run stopped while this call waited: it is not sent
            if self.fence is not None:  # ... or the process slept past the question's lease
                self.fence.check(question_id)
            if self.wire is not None:  # in memory, unless the mark is old: the slot is now
                await self.wire.ready(question_id)
        except BaseException:  # not sent: the reservation, tokens and prompt go back at once
            if self.wire is not None:
                self.wire.over(question_id)
            self.probe.abandoned(held.probe)
            if held.taken and limits.tokens is not None:
                limits.tokens.reconcile(held.taken, 0)
            if held.counted and limits.daily is not None:
                limits.daily.untake()
            with anyio.CancelScope(shield=True):
                await limits.release(held.worst)
            raise

    async def _request(
        self, endpoint: Endpoint, body: bytes, head: _Head, held: _Held
    ) -> CallResult:
        """Send the request. A refusal raises with its ledger row (at cost 0, or the worst
        case when its usage cannot be priced), after :meth:`_on_error` learned from it."""
        limits = self.limits
        started = time.perf_counter()
        self.sent += 1
        self.on_wire += 1
        try:
            return await self.client.generate(endpoint, body, held.credentials)
        except GeminiError as error:
            if limits.tokens is not None:
                limits.tokens.reconcile(held.taken, 0)
            if isinstance(error, Unreachable):  # nothing was sent: no ledger row to settle it
                await limits.release(held.worst)
                raise
            latency_ms = (time.perf_counter() - started) * 1000.0
            paid = 0  # a refused call is not billed ...
            if isinstance(error, InvalidUsage):  # ... one answered with unpriceable usage is
                paid = held.worst or self._worst_micro(held.price, held.estimate, held.tool)
            error.record = CallRecord(
                *head,
                latency_ms,
                error.http_status,
                error.error_class,
                cost_micro_usd=paid,
                cost_complete=held.price is not None or not isinstance(error, InvalidUsage),
                reserved_micro=held.worst,
            )
            await self._on_error(error, held.tool, head.model, head.question_id, held.probe)
            raise
        except BaseException:  # cancelled mid-call: no ledger row will settle it
            with anyio.CancelScope(shield=True):
                await limits.release(held.worst)
            raise
        finally:
            self.on_wire -= 1
            if self.wire is not None:
                self.wire.over(head.question_id)
            self.probe.abandoned(held.probe)  # no verdict on the day (a 503, say): the next probes

    async def _answered(self, result: CallResult, head: _Head, held: _Held) -> Metered:
        """An answered call: the model's storm ends, the token estimate is corrected, the rate
        may rise, and the ledger row carries the call's cost and its budget reservation."""
        limits = self.limits
        self.storms.answered(head.model)
        if held.tool is not None:
            self.probe.answered()
        usage = result.response.usage_metadata
        if limits.tokens is not None:
            limits.tokens.reconcile(held.taken, usage.prompt_token_count)
        if self._adaptive:
            try:
                await limits.requests.on_success()
            except DatabaseOutage:  # paid: the response goes on to the writer (or the spill)
                log.debug("the shared rate could not be raised", extra={"action": "rate_kept"})
        response = result.response
        grounding = response.candidates[0].grounding_metadata if response.candidates else None
        price = held.price
        cost = (
            call_cost(
                price,
                usage,
                grounding,
                tool=held.tool,
                billed_floor=self._billed_queries.get(head.model, 0.0),
            )
            if price is not None
            else None
        )
        record = CallRecord.answered(*head, result.latency_ms, usage, cost)
        return Metered(result, dataclasses.replace(record, reserved_micro=held.worst))

    async def _waiting_for(self, permit: str, wait: Awaitable[T]) -> T:
        """``wait``, counted in ``waiting[permit]`` while it lasts."""
        self.waiting[permit] += 1
        try:
            return await wait
        finally:
            self.waiting[permit] -= 1

    async def _reserve(
        self,
        price: Price | None,
        model: str,
        estimate: int,
        tool: str | tuple[str, ...] | None,
        *,
        reads_pages: bool = False,
    ) -> int:
        """Reserve the call's worst case in the job's budget row; micro-dollars held."""
        if self.limits.budget_micro is None:
            return 0
        if price is None:
            raise BudgetExhausted(
                f"no price is known for {model!r} ({self._backend}), so a budget cannot be"
                " enforced: add a row to the prices file (limits.prices_file)"
            )
        if reads_pages:
            worst = self._worst_case.reading_micro(price, estimate)
        else:
            worst = self._worst_case.micro(
                price, estimate, tool, billed_floor=self._billed_queries.get(model, 0.0)
            )
        if not await self.limits.reserve(worst):
            raise BudgetExhausted(await self.limits.budget_message(worst))
        return worst

    def _worst_micro(
        self, price: Price | None, estimate: int, tool: str | tuple[str, ...] | None
    ) -> int:
        """The most the call may cost, in micro-dollars (0 with no price known)."""
        return self._worst_case.micro(price, estimate, tool) if price is not None else 0

    async def _pass_daily(self, limits: JobLimits) -> int | None:
        """Count a grounded prompt in the job's daily row, or raise GroundingPaused: while the
        day is paused, or while bare 429s are probed and this call is not the probe. Returns
        the probe's number when this call is it."""
        paused_until = self.pause.paused_until
        if paused_until is not None:
            raise GroundingPaused(paused_until, self.pause.message())
        held_until, probe = self.probe.admit()
        if held_until is not None:
            raise GroundingPaused(held_until, self.probe.message())
        try:
            await self._count_daily(limits)
        except BaseException:
            self.probe.abandoned(probe)
            raise
        return probe

    async def _count_daily(self, limits: JobLimits) -> None:
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

    async def _on_error(
        self,
        error: GeminiError,
        tool: str | tuple[str, ...] | None,
        model: str,
        question_id: int,
        probe: int | None,
    ) -> None:
        """Learn from a refused call, and raise what the retry policy decides on:

        * a 503: :class:`Overloaded` (the model's storm goes on; no attempt spent);
        * a 429 whose body names a per-day quota: grounded calls pause for the day, and a
          grounded call raises GroundingPaused (it waits for the reset);
        * a bare 429 on a grounded call (:func:`classify_429` ``"bare"``): the day's pause
          when the job's own daily count is used up, or when the probe's bare 429s have
          persisted long enough (:class:`~pipeline.limits.probe.DailyProbe`); otherwise the
          rate slows and the call is :class:`Throttled` until the next probe;
        * any other 429: the rate slows (the row's, every process's), :class:`Throttled`.

        The server's delay (RetryInfo, ``Retry-After``) is a floor of every wait. The raised
        error carries ``error``'s ledger row. ``probe``: this call's number as the daily
        probe, when it was one."""
        status = error.http_status
        if status not in (429, OVERLOADED_HTTP):
            return
        delay = server_delay(error.retry_delay, error.retry_after, utcnow())
        if status == OVERLOADED_HTTP:
            refusal = self.storms.refused(model, question_id)
            if refusal.tries == 1 and refusal.lasted_s == 0.0:
                log.warning(
                    "503: %s is overloaded; waiting it out, no attempt spent",
                    model,
                    extra={"action": "overloaded", "model": model},
                )
            overloaded = Overloaded(
                error.message, tries=refusal.tries, lasted_s=refusal.lasted_s, retry_delay=delay
            )
            raise self._attached(overloaded, error)
        await self._on_429(error, tool, model, question_id, probe, delay)

    async def _on_429(
        self,
        error: GeminiError,
        tool: str | tuple[str, ...] | None,
        model: str,
        question_id: int,
        probe: int | None,
        delay: float | None,
    ) -> None:
        """A 429 (see :meth:`_on_error`): the day's pause, or a slower rate and Throttled;
        returns only for an ungrounded call's day (asked again as a failed try)."""
        grounded = tool is not None
        kind = classify_429(error.body, grounded=grounded, backend=self._backend)
        if kind in _DAY_REASONS:
            self._pause_for_day(_DAY_REASONS[kind])
        elif kind == "bare":
            await self._bare_429(delay, probe)
        if kind not in _DAY_REASONS:
            await self._slow_down()
        paused_until = self.pause.paused_until
        if grounded and paused_until is not None:
            raise self._attached(GroundingPaused(paused_until, self.pause.message()), error)
        if kind in _DAY_REASONS:  # an ungrounded call's day: asked again as a failed try
            return
        if kind == "bare" and delay is None:  # wait for the next probe, at least
            delay = self.probe.wait_left_s()
        refusal = self.storms.refused(model, question_id)
        raise self._attached(
            Throttled(
                error.message, tries=refusal.tries, lasted_s=refusal.lasted_s, retry_delay=delay
            ),
            error,
        )

    async def _bare_429(self, delay: float | None, probe: int | None) -> None:
        """A bare 429 on a grounded call: the day's pause, when the evidence is in."""
        daily = self.limits.daily
        if daily is not None and await daily.used_up():
            self._pause_for_day(
                f"the configured grounded_prompts_per_day ({self.limits.grounded_per_day})"
                " is used up, and the server refused a grounded call (429)"
            )
            return
        if self.probe.refused(delay, probe):
            settings = self.probe.settings
            self._pause_for_day(
                f"bare 429s on grounded calls persisted (at least {settings.bare_429s} over"
                f" {settings.over_s:g} s, no grounded answer between): the daily grounding quota"
                " is taken as used up"
            )
            return
        log.info(
            "429 on a grounded call with no quota named: probing (%d so far)",
            self.probe.refusals,
            extra={"action": "daily_probe", "refusals": self.probe.refusals},
        )

    def _pause_for_day(self, reason: str) -> None:
        until = self.pause.pause_for_day(reason)
        self.probe.answered()  # the day's verdict is in: any probe ends (afresh after the reset)
        log.warning(
            "grounded calls paused until %s: %s",
            until.isoformat(),
            reason,
            extra={"action": "grounding_paused", "until": until.isoformat()},
        )

    async def _slow_down(self) -> None:
        """A 429: lower every process's rate (the row's), when the job follows 429s."""
        requests = self.limits.requests
        if self._adaptive and await requests.on_throttle():
            log.info(
                "429: the job's shared sending rate lowered to %.1f/s",
                requests.rate,
                extra={"action": "rate_lowered", "rate": requests.rate},
            )

    @staticmethod
    def _attached(raised: CallError, error: GeminiError) -> CallError:
        """``raised``, carrying ``error``'s ledger row (the call was made: it is stored)."""
        raised.record = error.record
        raised.__cause__ = error
        return raised


def ledger_row(error: CallError) -> CallRecord | None:
    """The ledger row ``error`` carries when the server was reached (that call is stored)."""
    return error.record if isinstance(error.record, CallRecord) else None
