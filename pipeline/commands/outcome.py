"""What a run came to, built from what it has at its end: a
:class:`~pipeline.run.outcome.RunOutcome` from the job file, the run's context (its calls,
spend and spill) and the job's counts read at the end (:mod:`pipeline.results.closing`)."""

from __future__ import annotations

import time
from decimal import Decimal

from pipeline.commands.common import display_url
from pipeline.exit_codes import ExitStatus, failures
from pipeline.job.spec import JobSpec
from pipeline.results.closing import JobCounts
from pipeline.run.context import RunContext
from pipeline.run.outcome import RunOutcome


def job_failures(spec: JobSpec, job: JobCounts) -> dict[str, int]:
    """What ``[job] fail_on`` counts as a failure in the job's counts."""
    return failures(
        job.states, spec.job.fail_on, job.sources, lost_share=spec.job.fail_on_sources_lost
    )


def early_outcome(spec: JobSpec, status: int, why: str | None, started: float) -> RunOutcome:
    """The outcome of a run that ended before it read the job's status: ``why`` it did."""
    return RunOutcome(
        job=spec.name,
        exit_status=ExitStatus(status),
        stopped=why,
        duration_s=time.monotonic() - started,
        fail_on=tuple(spec.job.fail_on),
        database=display_url(spec),
    )


def outcome_of(
    spec: JobSpec,
    status: ExitStatus,
    started: float,
    ctx: RunContext | None,
    job: JobCounts | None,
    *,
    stopped: str | None,
) -> RunOutcome:
    """What the run came to: ``ctx`` its calls and spill (None: no call was due), ``job`` the
    job's counts at its end (None: they could not be read)."""
    summary = None if ctx is None else ctx.summary
    spill = None if ctx is None else ctx.spill
    return RunOutcome(
        job=spec.name,
        exit_status=status,
        counts={} if job is None else job.states,
        calls=0 if summary is None else summary.calls,
        spend_usd=Decimal(0 if summary is None else summary.cost_micro_usd) / 1_000_000,
        job_spend_usd=Decimal(0) if job is None else job.spend_usd,
        stopped=stopped,
        spill_file=spill.path if spill is not None and spill.kept else None,
        duration_s=time.monotonic() - started,
        fail_on=tuple(spec.job.fail_on),
        failures={} if job is None else job_failures(spec, job),
        run=None if summary is None else summary.to_dict(),
        status=None if job is None else job.to_dict(),
        database=display_url(spec),
    )
