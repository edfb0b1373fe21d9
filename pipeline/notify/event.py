"""What each ``[notify]`` event says (pure: no clock, no secret, no network here).

* ``run.finished``: a run ended with its work done (exit 0, or 3: some questions in a
  ``fail_on`` state); ``data`` is the outcome;
* ``run.stopped``: a run stopped early or could not do its work (exit 1 or 2); ``data`` is
  the outcome and its ``cause``;
* ``budget.reached``: the budget stopped the spending (online: the next call did not fit;
  batch mode: a batch was cut or not created);
* ``batch.submitted`` / ``batch.completed``: a batch created at Google, and one that ended
  (its results stored, or its questions given back), written by :mod:`pipeline.batch`;
* ``verify.gate_failed``: ``ground verify`` found a class below ``[verify] fail_below``.

The body (:func:`pipeline.store.notify_deliveries.event_body`) is Standard Webhooks' payload
shape: ``{"type", "timestamp", "data"}``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pipeline.exit_codes import ExitStatus
from pipeline.run.outcome import RunOutcome

__all__ = [
    "budget_data",
    "gate_data",
    "is_budget_stop",
    "run_event",
]

# How a stop by the budget begins (pipeline.limits.policy online, pipeline.batch.budget in
# batch mode).
BUDGET_STOPS = ("budget: ", "budget_usd ")


def is_budget_stop(reason: str | None) -> bool:
    """Whether ``reason`` (a run's stop) is the budget's."""
    return reason is not None and reason.startswith(BUDGET_STOPS)


def run_event(outcome: RunOutcome) -> tuple[str, dict[str, Any]]:
    """``run.finished`` or ``run.stopped``, and what it says of ``outcome``."""
    data = outcome_data(outcome)
    if outcome.exit_status in (ExitStatus.OK, ExitStatus.SOME_FAILED):
        return "run.finished", data
    return "run.stopped", {**data, "cause": outcome.stopped or outcome.outcome}


def outcome_data(outcome: RunOutcome) -> dict[str, Any]:
    """What an event says of a run: the job, its outcome, the job's counts, this run's calls
    and spend (and the job's), why it stopped, and how long it took. No local path (the spill
    file stays on the machine that has it)."""
    return {
        "job": outcome.job,
        "outcome": outcome.outcome,
        "exit_status": int(outcome.exit_status),
        "counts": dict(outcome.counts),
        "failures": dict(outcome.failures),
        "calls": outcome.calls,
        "spend_usd": str(outcome.spend_usd),
        "job_spend_usd": str(outcome.job_spend_usd),
        "stopped": outcome.stopped,
        "duration_s": round(outcome.duration_s, 3),
    }


def budget_data(job: str, budget_usd: Decimal | None, cause: str) -> dict[str, Any]:
    """``budget.reached``: the job, its budget (exact decimal string) and the stop's cause."""
    return {
        "job": job,
        "budget_usd": None if budget_usd is None else str(budget_usd),
        "cause": cause,
    }


def gate_data(job: str, fail_below: float, classes: dict[str, tuple[float, float, int]]) -> dict:
    """``verify.gate_failed``: the job, the threshold, and each failing class's 95 % interval
    and the readable pairs it rests on."""
    return {
        "job": job,
        "fail_below": fail_below,
        "classes": [
            {"class": name, "low": round(low, 4), "high": round(high, 4), "readable": readable}
            for name, (low, high, readable) in sorted(classes.items())
        ],
    }
