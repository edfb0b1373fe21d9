"""The one root of ground's errors, and the error tree of a model call under it.

:class:`GroundError` is the root of every error a user of the ``ground`` command or of the
Python API (:mod:`pipeline.results.api`) can meet: each package's own errors (a job file that
cannot be used, a question file that cannot be loaded, a database ground cannot use, an output
it cannot write ...) derive from it, most also from the built-in they were always raised as
(``ValueError``, ``RuntimeError``), so that older ``except`` clauses still catch them. A
foreign library's error (SQLAlchemy's, aiohttp's, msgspec's) is mapped onto one of them once,
at the edge that meets it. ``tests/unit/test_error_root.py`` holds every exception class of
``pipeline`` to this.

Everything a model call can raise instead of returning is a :class:`CallError`:

A call (:meth:`pipeline.online.call.MeteredCaller.call`) either returns its result or raises a
:class:`CallError`. The three branches say what kind of failure it is; what to *do* about it
(wait how long, spend an attempt or not, give up, stop the run) is decided in one place,
:meth:`pipeline.limits.policy.RetryPolicy.decide`.

=========================  ==============  ===============================================
class                      branch          when
=========================  ==============  ===============================================
``GroundingPaused``        retryable       the daily grounding bucket is empty (or a bare 429
                                           is being probed): wait until ``until``, no attempt
                                           spent
``Throttled``              retryable       a 429 that is no daily exhaustion: the rate slows,
                                           the call waits (the server's delay a floor), no
                                           attempt spent
``Overloaded``             retryable       a 503 (the model is overloaded): back off, no
                                           attempt spent; a storm longer than ``[limits]
                                           overload_wait_s`` stops the run
``gemini.Unreachable``     retryable       nothing could be sent: no attempt spent;
                                           repeated, it stops the run
``gemini.TransientError``  retryable       408/429/5xx, timeouts, truncated bodies
``gemini.PermanentError``  permanent       400, 404 model, other 4xx
``gemini.FatalError``      run-fatal       401/403, a wrong key: no attempt spent; a few
                                           stop the run
``BudgetExhausted``        run-fatal       the next call's worst case does not fit: the run
                                           stops, the question is given back untouched
``CredentialsUnavailable`` run-fatal       no access token could be had: nothing was sent;
                                           the run stops, the question is given back
                                           untouched
``NotSent``                (none)          the run stopped while the call waited for a
                                           permit (rate, tokens, budget): nothing was sent,
                                           the question is given back untouched
``LeaseLost``              (none)          the question's lease ran out before the request
                                           left (the process was paused, or another took
                                           the question over): nothing was sent, the
                                           question is given back untouched
=========================  ==============  ===============================================

This module sits above ``gemini/`` because the budget and the daily gate are the run's own
limits, not the API's: ``gemini/api_errors.py`` roots its HTTP errors here.

A failure whose request reached the server carries its ledger row in ``record`` (a
:class:`~pipeline.rows.CallRecord` at cost 0): a call that was made is always stored.
Messages never contain credentials: every message is passed through
:func:`pipeline.redaction.redact` here, where the error is made, before anything can log,
store or print it.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum

from pipeline.redaction import redact

MAX_MESSAGE_CHARS = 500  # error text stored per question


class ErrorClass(StrEnum):
    """The error classes the pipeline itself assigns.

    Errors the API reports are classed from the response instead: ``http_<status>`` for a
    retryable status, Google's own ``status`` in lower case (``invalid_argument``,
    ``not_found``, ...) for a permanent one. Those are stored as they come.
    """

    AUTH = "auth"  # 401/403 or a key the API refused: the run stops after a few
    # A batch row its stats count but its output lacks, missing from a second batch too
    BATCH_ROW_FAILED = "batch_row_failed"
    BATCH_ROW_MISSING = "batch_row_missing"  # ... from one batch: asked again in the next
    BLOCKED = "blocked"
    BUDGET = "budget"  # the run stopped: the next call did not fit in the budget
    CONNECTION = "connection"
    # [limits] max_cost_per_question_usd reached: no further nudge, re-ask or call 2
    COST_CAP = "cost_cap"
    CREDENTIALS = "credentials"  # no token could be had: the run stops, nothing was sent
    EMPTY_ANSWER = "empty_answer"
    GROUNDING_PAUSED = "grounding_paused"  # the daily grounding bucket is empty
    INTERNAL_ERROR = "internal_error"  # a bug of ours, confined to one question
    LEASE_LOST = "lease_lost"  # the lease ran out before the request left: given back unsent
    MALFORMED_RESPONSE = "malformed_response"
    # 404 for the model itself (not found, or no longer available): the run stops, exit 2
    MODEL_NOT_FOUND = "model_not_found"
    NOT_SENT = "not_sent"  # the run stopped before the request was sent: given back untouched
    # own retrieval: no chunk of the job's index scored min_score; no call was made
    NOTHING_RELEVANT = "nothing_relevant"
    # 503: the model is overloaded; waited out (no attempt spent) up to overload_wait_s
    OVERLOADED = "overloaded"
    OVERSIZED_RESPONSE = "oversized_response"
    RATE_LIMITED = "rate_limited"
    RESOLVE_TRANSIENT = "resolve_transient"  # a redirect lookup to try again
    SCHEMA_INVALID = "schema_invalid"
    TIMEOUT = "timeout"
    TRUNCATED = "truncated"
    UNREACHABLE = "unreachable"


class GroundError(Exception):
    """The root of every error ground raises to its user (the command line or the Python API):
    ``except pipeline.GroundError`` catches any of them, never a bug's ``TypeError``."""


class CallError(GroundError):
    """A call that did not produce a usable response (the root of the tree)."""

    error_class: str = "error"
    # Seconds the server asked us to wait (RetryInfo.retryDelay): a floor for the backoff.
    retry_delay: float | None = None

    def __init__(self, message: str) -> None:
        super().__init__(redact(message)[:MAX_MESSAGE_CHARS])
        # The ledger row (a pipeline.rows.CallRecord) when the server was reached, read with
        # pipeline.online.call.ledger_row: typed loosely here, which sits below the records.
        self.record: object | None = None

    @property
    def message(self) -> str:
        return str(self.args[0])

    @property
    def retryable(self) -> bool:
        return isinstance(self, RetryableError)


class RetryableError(CallError):
    """Asking again later may succeed."""


class PermanentCallError(CallError):
    """Asking again will fail the same way: the question is a dead letter."""


class RunFatalError(CallError):
    """The run, not the question, is at fault (credentials, budget): stop rather than burn."""


class ModelGone(RunFatalError):
    """The API answered 404 for the model itself (an unknown id, or a model switched off):
    every question would fail the same way, so the run stops at once, its questions left
    pending, with exit status 2 (an edit of ``[model] name`` cures it)."""

    error_class = ErrorClass.MODEL_NOT_FOUND


# The prefix of a run's stop line when the model is gone (pipeline.exit_codes.run_status).
MODEL_GONE_STOP = "the model is not available"


class GroundingPaused(RetryableError):
    """The daily grounding bucket is empty until ``until``."""

    error_class = ErrorClass.GROUNDING_PAUSED

    def __init__(self, until: dt.datetime, message: str) -> None:
        super().__init__(message)
        self.until = until


class CapacityRefused(RetryableError):
    """The server refused for capacity, not for the question: waited out, no attempt spent.

    ``tries``: this question's refusals in the model's current storm (the backoff's exponent);
    ``lasted_s``: how long the storm has lasted (refusals with no answer between);
    ``retry_delay``: the server's own delay (RetryInfo or ``Retry-After``), a floor.
    """

    def __init__(
        self, message: str, *, tries: int, lasted_s: float, retry_delay: float | None
    ) -> None:
        super().__init__(message)
        self.tries = tries
        self.lasted_s = lasted_s
        self.retry_delay = retry_delay


class Throttled(CapacityRefused):
    """A 429 that says no day's quota ran out: slow down and ask again."""

    error_class = ErrorClass.RATE_LIMITED


class Overloaded(CapacityRefused):
    """A 503: the model is overloaded; ask again after a backoff."""

    error_class = ErrorClass.OVERLOADED


class BudgetExhausted(RunFatalError):
    """The next call's worst case does not fit in what is left of the budget."""

    error_class = ErrorClass.BUDGET


class CredentialsUnavailable(RunFatalError):
    """No access token could be had (the token endpoint did not answer, or refused): nothing
    was sent, and no question is at fault. The run stops at once; the question is given back
    untouched."""

    error_class = ErrorClass.CREDENTIALS


class NotSent(CallError):
    """The run is stopping: a call that was still waiting for a permit is not sent."""

    error_class = ErrorClass.NOT_SENT


class LeaseLost(NotSent):
    """The question's lease is no longer this process's (:mod:`pipeline.online.fence`): its
    call is not sent, and the question is given back."""

    error_class = ErrorClass.LEASE_LOST
