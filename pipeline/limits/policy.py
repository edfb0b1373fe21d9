"""The retry policy: one ``decide(error, attempts, step)`` for every failed step.

Shaped like procrastinate's ``RetryDecision``: a failure goes in, a small frozen
:class:`Decision` comes out, saying either *retry* (after ``delay_s``, or at ``retry_at``;
spending an attempt or not) or *give up* (with the terminal state and the error class).
The answerer (calls 1 and 2), the worker (stopping the run) and the resolver (transient
lookup failures) all take their decisions here; none computes a delay or counts attempts on
its own.

=========================  =================================================================
error                      decision
=========================  =================================================================
``BudgetExhausted``        give the question back untouched (``state`` None); stop the run
``CredentialsUnavailable`` give the question back untouched; stop the run (exit 1)
``ModelGone`` (404 model)  give the question back untouched; stop the run at once (exit 2)
``NotSent``                give the question back untouched, no attempt spent (the run is
                           already stopping)
``GroundingPaused``        wait until the reset (or the next daily probe), no attempt
                           spent; a pause longer than ``long_pause`` stops the run (the next
                           run picks the work up)
``Overloaded`` (503),      ``overload_backoff`` (full jitter on the question's refusals in
``Throttled`` (429)        the storm, each wait at most 64 s; the server's RetryInfo or
                           Retry-After a floor), no attempt spent; a storm longer than
                           ``overload_wait_s`` stops the run (the questions wait for the next)
``Unreachable``            wait ``unreachable_wait_s``, no attempt spent; strike
                           ``"unreachable"`` (5 in a row, no success between, stop the run)
``FatalError`` (auth)      back to waiting at once, no attempt spent; strike ``"auth"``
                           (3 stop the run)
other retryable            backoff (full jitter, RetryInfo a floor) while ``attempts <
                           max_attempts``; then give up as ``failed``
permanent                  give up as ``failed``, with the error's class
=========================  =================================================================

``attempts`` counts the tries of this step *including the one that just failed*; a decision
that does not spend an attempt gives it back (``attempts_after``).

Strikes are counted per run by :class:`Strikes` (the worker owns one): the policy itself
keeps no state but its backoff's random source, so one instance can serve a whole run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.clock import utcnow
from pipeline.errors import (
    MODEL_GONE_STOP,
    BudgetExhausted,
    CallError,
    CapacityRefused,
    CredentialsUnavailable,
    ErrorClass,
    GroundingPaused,
    ModelGone,
    NotSent,
    RunFatalError,
)
from pipeline.gemini.api_errors import Unreachable
from pipeline.job.states import QuestionState
from pipeline.limits.backoff import Backoff
from pipeline.limits.overload import OVERLOAD_BASE_S, OVERLOAD_CAP_S, OVERLOAD_WAIT_S
from pipeline.limits.probe import ProbeSettings

__all__ = [
    "GROUND",
    "STRUCTURE",
    "Decision",
    "RetryPolicy",
    "Strikes",
]

GROUND = "ground"  # call 1
STRUCTURE = "structure"  # call 2
DEFAULT_MAX_ATTEMPTS = 5  # tries of a step before a retryable failure gives up
UNREACHABLE_WAIT_S = 5.0  # seconds: a question whose call could not connect waits this long
# A daily-quota pause longer than this ends the run (the questions wait, dated, for the next
# run after the reset) rather than holding a process idle for hours.
LONG_PAUSE = dt.timedelta(minutes=10)
# Failures that, repeated, stop the run: how many.
STOP_AFTER: Mapping[str, int] = {ErrorClass.UNREACHABLE: 5, ErrorClass.AUTH: 3}
RESET_ON_SUCCESS = frozenset({ErrorClass.UNREACHABLE})  # counted in a row: a success starts again
# Where a question waits for its next try, by step (anything else: a source's lookup).
_WAITING_STATE = {GROUND: QuestionState.RETRY_WAIT, STRUCTURE: QuestionState.AWAITING_STRUCTURE}


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after a failure. ``retry`` False: ``state`` is terminal."""

    retry: bool
    state: QuestionState | None  # the next state; None: hand the question back untouched
    error_class: str  # an ErrorClass, or a class the API reported
    delay_s: float = 0.0  # retry after this long ...
    retry_at: dt.datetime | None = None  # ... or at this time, when set
    spend_attempt: bool = True
    strike: str | None = None  # a run-level count this failure adds to (see STOP_AFTER)
    stop: str | None = None  # why the run stops: at once, or when the strike count is reached

    def next_attempt_at(self, now: dt.datetime) -> dt.datetime:
        if self.retry_at is not None:
            return self.retry_at
        return now + dt.timedelta(seconds=max(self.delay_s, 0.0))

    def attempts_after(self, attempts: int) -> int:
        """The attempt count to store, given ``attempts`` including the failed try."""
        return attempts if self.spend_attempt else attempts - 1


class RetryPolicy:
    """Decides retries for one run (or one resolver). Stateless but for the backoff's rng."""

    __slots__ = (
        "backoff",
        "daily_probe",
        "long_pause",
        "max_attempts",
        "overload_backoff",
        "overload_wait_s",
        "unreachable_wait_s",
    )

    def __init__(
        self,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff: Backoff | None = None,
        unreachable_wait_s: float = UNREACHABLE_WAIT_S,
        long_pause: dt.timedelta = LONG_PAUSE,
        overload_wait_s: float = OVERLOAD_WAIT_S,
        overload_backoff: Backoff | None = None,
        daily_probe: ProbeSettings | None = None,
    ) -> None:
        """``overload_wait_s``: how long a model's storm of capacity refusals (503, 429) is
        waited out before the run stops; ``overload_backoff``: the waits in it;
        ``daily_probe``: how long bare 429s on grounded calls must persist before they pause
        grounding for the day (read by the caller that probes them)."""
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts!r}")
        if not overload_wait_s > 0:
            raise ValueError(f"overload_wait_s must be > 0, got {overload_wait_s!r}")
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self.unreachable_wait_s = unreachable_wait_s
        self.long_pause = long_pause
        self.overload_wait_s = overload_wait_s
        self.overload_backoff = overload_backoff or Backoff(
            base_s=OVERLOAD_BASE_S, cap_s=OVERLOAD_CAP_S
        )
        self.daily_probe = daily_probe or ProbeSettings()

    def __repr__(self) -> str:
        return f"RetryPolicy(max_attempts={self.max_attempts!r}, backoff={self.backoff!r})"

    def decide(self, error: CallError, attempts: int, step: str) -> Decision:
        """The decision on ``error``, the failure of try number ``attempts`` of ``step``."""
        waiting = _WAITING_STATE.get(step, QuestionState.PENDING)
        kind = error.error_class
        if isinstance(error, NotSent):
            return Decision(True, None, kind, spend_attempt=False)
        if isinstance(error, BudgetExhausted):
            return Decision(True, None, kind, spend_attempt=False, stop=f"budget: {error}")
        if isinstance(error, ModelGone):
            stop = f"{MODEL_GONE_STOP}: {error.message}"
            return Decision(True, None, kind, spend_attempt=False, stop=stop)
        if isinstance(error, CredentialsUnavailable):
            return Decision(True, None, kind, spend_attempt=False, stop=f"credentials: {error}")
        if isinstance(error, GroundingPaused):
            stop = None
            if error.until - utcnow() > self.long_pause:
                stop = f"{error}; run again after {error.until:%Y-%m-%d %H:%M} UTC"
            return Decision(
                True, waiting, kind, retry_at=error.until, spend_attempt=False, stop=stop
            )
        if isinstance(error, CapacityRefused):
            delay = self.overload_backoff.delay(error.tries, error.retry_delay)
            stop = None
            if error.lasted_s > self.overload_wait_s:
                stop = (
                    f"the model refused for capacity (503 overloaded, 429 throttled) for"
                    f" {round(error.lasted_s, 1):g} s with no answer (limits.overload_wait_s ="
                    f" {self.overload_wait_s:g}), the last time: {error.message}; run again later"
                )
            return Decision(True, waiting, kind, delay_s=delay, spend_attempt=False, stop=stop)
        if isinstance(error, Unreachable):
            stop = f"the model endpoint is unreachable: {error.message}"
            return Decision(
                True,
                waiting,
                kind,
                delay_s=self.unreachable_wait_s,
                spend_attempt=False,
                strike=ErrorClass.UNREACHABLE,
                stop=stop,
            )
        if isinstance(error, RunFatalError):  # the credentials, not the question, are at fault
            stop = f"authentication or permission failure: {error.message}"
            return Decision(
                True, waiting, kind, spend_attempt=False, strike=ErrorClass.AUTH, stop=stop
            )
        if error.retryable and attempts < self.max_attempts:
            delay = self.backoff.delay(attempts, error.retry_delay)
            return Decision(True, waiting, kind, delay_s=delay)
        return Decision(False, QuestionState.FAILED, kind)


class Strikes:
    """Run-level counts of the failures that, repeated, stop the run (see ``STOP_AFTER``)."""

    __slots__ = ("_counts", "_stop_after")

    def __init__(self, stop_after: Mapping[str, int] = STOP_AFTER) -> None:
        self._stop_after = dict(stop_after)
        self._counts: dict[str, int] = {}

    def success(self) -> None:
        """A call went through: the counts kept "in a row" start again."""
        for strike in RESET_ON_SUCCESS:
            self._counts.pop(strike, None)

    def add(self, decision: Decision) -> str | None:
        """Count ``decision``'s strike; why the run must stop now, or None."""
        if decision.strike is None:
            return decision.stop
        count = self._counts[decision.strike] = self._counts.get(decision.strike, 0) + 1
        if count >= self._stop_after.get(decision.strike, 1):
            return decision.stop
        return None
