"""Rate limits, token budgets, adaptive throttling, the daily grounding gate, backoff, retries.

Building blocks, each usable and testable on its own (clocks and sleeps are injectable):

=========================  ==============================================================
``RateLimiter``            requests per second, *no burst*: exact virtual scheduling (GCRA)
                           (``rate``)
``TokenBudgetLimiter``     tokens per sliding window (TPM), reserved before a call from an
                           estimate and reconciled after it from ``usageMetadata`` (``tokens``)
``AdaptiveRate``           AIMD on 429s: multiplicative decrease (once per cool-down),
                           additive recovery up to the configured ceiling (``adaptive``)
``DailyGroundingGate``     pauses grounded calls until the daily reset, midnight Pacific
                           (``daily``)
``Backoff``                full-jitter exponential backoff; a server ``retryDelay`` is a floor
                           (``backoff``, with the bare ``retry_delay``)
``RetryPolicy``            one ``decide(error, attempts, step) -> Decision`` for every failed
                           step; ``Strikes`` counts the failures that stop a run (``policy``)
=========================  ==============================================================

The 429 classifier (per-minute throttle or exhausted daily bucket) lives with the other error
parsing, in :func:`pipeline.gemini.api_errors.classify_429`.

Everything runs on one event loop (anyio, asyncio backend). State changes happen between
awaits, so no lock is needed except where a waiter must keep its place in a queue
(``TokenBudgetLimiter``). Nothing here is shared across processes: with several worker
processes each one must get its share of the quota.

Sources are in ``shared/reference/gemini-wire-format.md`` (§4.1 errors, §5 limits) and
``shared/reference/batch-anchors.md`` (§5 rate limiting).
"""

from pipeline.limits.adaptive import AdaptiveRate
from pipeline.limits.backoff import Backoff, retry_delay
from pipeline.limits.daily import DailyGroundingGate, next_daily_reset
from pipeline.limits.policy import Decision, RetryPolicy, Strikes
from pipeline.limits.rate import RateLimiter, pacing_rate
from pipeline.limits.tokens import TokenBudgetLimiter, TokenReservation, estimate_tokens

__all__ = [
    "AdaptiveRate",
    "Backoff",
    "DailyGroundingGate",
    "Decision",
    "RateLimiter",
    "RetryPolicy",
    "Strikes",
    "TokenBudgetLimiter",
    "TokenReservation",
    "estimate_tokens",
    "next_daily_reset",
    "pacing_rate",
    "retry_delay",
]
