"""The event a run's end sends (``[notify]``): which one, and its body. Pure: no clock read,
no secret, no network here (:mod:`pipeline.notify.webhook` sends it).

One event per run, by what the run came to (:class:`~pipeline.run.outcome.RunOutcome`):

* ``budget_spent``: the budget stopped it (online: the next call did not fit; batch mode: a
  batch was cut or not created);
* ``finished``: it finished (exit 0, or 3: some questions in a ``fail_on`` state);
* ``failed``: it stopped early, or could not do its work (exit 1 or 2).

The body follows Standard Webhooks' payload shape: ``{"type", "timestamp", "data"}``, with
``type`` ``run.finished``, ``run.failed`` or ``run.budget_spent``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson

from pipeline.exit_codes import ExitStatus
from pipeline.run.outcome import RunOutcome

# How a stop by the budget begins (pipeline.limits.policy online, pipeline.batch.budget in
# batch mode).
_BUDGET_STOPS = ("budget: ", "budget_usd ")
EVENT_PREFIX = "run."


def event_name(outcome: RunOutcome) -> str:
    """``finished``, ``failed`` or ``budget_spent``: the event ``outcome`` is."""
    if outcome.stopped is not None and outcome.stopped.startswith(_BUDGET_STOPS):
        return "budget_spent"
    if outcome.exit_status in (ExitStatus.OK, ExitStatus.SOME_FAILED):
        return "finished"
    return "failed"


def event_data(outcome: RunOutcome) -> dict[str, Any]:
    """What the event says of the run: the job, its outcome, the job's counts, this run's
    calls and spend (and the job's), why it stopped, and how long it took. No local path
    (the spill file stays on the machine that has it)."""
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


def event_body(outcome: RunOutcome, at: dt.datetime) -> bytes:
    """The JSON body POSTed for ``outcome``, at the instant ``at`` (UTC)."""
    document = {
        "type": EVENT_PREFIX + event_name(outcome),
        "timestamp": at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "data": event_data(outcome),
    }
    return orjson.dumps(document)
