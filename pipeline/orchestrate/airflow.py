"""``ground`` as an Airflow 3 task: :class:`GroundRunOperator`, and :class:`GroundBatchTrigger`
that waits on a batch-mode job in the triggerer, without a worker slot.

    from pipeline.orchestrate.airflow import GroundRunOperator

    GroundRunOperator(task_id="nightly", job="jobs/nightly.toml", retries=3)

The operator runs the job as ``ground run`` does (:func:`pipeline.run_job`), pushes what came
of it to XCom (key ``outcome``: :meth:`~pipeline.run.outcome.RunOutcome.to_dict`, JSON's
types) and maps the exit contract (:mod:`pipeline.exit_codes`) to Airflow's model
(:func:`settle`):

======  ==========================================================================
``0``   the task succeeds
``1``   :class:`AirflowException`: the task's ``retries`` apply (a rerun resumes and never
        pays twice for an answer)
``2``   :class:`AirflowFailException`: the task fails at once, never retried (only an edit
        of the job file, the question file or the environment cures it)
``3``   ``some_failed="fail"`` (the default): :class:`AirflowFailException`, no retry (the
        data stored is good; ``ground retry`` requeues the failures); ``"warn"``: the task
        succeeds and logs a warning
======  ==========================================================================

With ``deferrable=True`` a batch-mode job (``[model] mode = "batch"``) submits its batches
and returns (``[batch] wait = false``, as ``ground run --no-wait``); the task then defers to
:class:`GroundBatchTrigger`, which asks the Batch API every ``poll_interval_s`` whether the
job's batches have ended (:func:`pipeline.api.running_batches_async`), and resumes on a
worker only to collect their results with one more run. An online job runs as without it.

Imported only by a DAG that uses it: ``import pipeline`` and ``ground`` never import Airflow
(``ground[airflow]`` installs it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from pipeline.api.batches import running_batches, running_batches_async
from pipeline.api.jobs import run_job
from pipeline.errors import GroundError
from pipeline.exit_codes import ExitStatus
from pipeline.run.outcome import RunOutcome

log = logging.getLogger(__name__)

XCOM_KEY = "outcome"  # the XCom the operator pushes the run's outcome to
SomeFailed = Literal["fail", "warn"]
# The override that makes a batch-mode run return once its batches are submitted.
NO_WAIT = "batch.wait"


def settle(outcome: Mapping[str, Any], *, some_failed: SomeFailed = "fail") -> None:
    """Airflow's reading of a run's outcome (:meth:`RunOutcome.to_dict`): return for a task
    that succeeds, raise for one that fails (:class:`AirflowException` is retried by the
    task's ``retries``, :class:`AirflowFailException` never is)."""
    status = outcome["exit_status"]
    job = outcome.get("job", "?")
    if status == ExitStatus.OK:
        return
    if status == ExitStatus.SOME_FAILED:
        said = f"ground: job {job!r} finished, but some questions failed: {outcome.get('failures')}"
        if some_failed == "warn":
            log.warning("%s", said)
            return
        raise AirflowFailException(f"{said} (exit 3; not retried: the data stored is good)")
    if status == ExitStatus.USAGE:
        raise AirflowFailException(
            f"ground: job {job!r} needs an edit (exit 2, not retried): {outcome.get('stopped')}"
        )
    # 1 (stopped early: budget, quota, outage, a signal) and anything else: retry later.
    raise AirflowException(
        f"ground: job {job!r} stopped early (exit {status}, retried): {outcome.get('stopped')}"
    )


def refused_outcome(job: str | Path, error: GroundError) -> dict[str, Any]:
    """The outcome of a run that never started (a job file that does not validate, no API
    key, a database that cannot be used), for XCom and :func:`settle`: the error's exit
    status (2 needs an edit, 1 retry later) and its one line."""
    status = getattr(error, "exit_status", None)
    if status is None:  # a job file that does not validate is the CLI's usage error
        status = ExitStatus.USAGE if isinstance(error, ValueError) else ExitStatus.FAILED
    return RunOutcome(job=str(job), exit_status=ExitStatus(status), stopped=str(error)).to_dict()


def with_no_wait(overrides: Iterable[str] | Mapping[str, Any]) -> list[str] | dict[str, Any]:
    """``overrides`` plus ``[batch] wait = false``, in the same form."""
    if isinstance(overrides, Mapping):
        return {**overrides, NO_WAIT: False}
    return [*overrides, f"{NO_WAIT}=false"]


class GroundRunOperator(BaseOperator):
    """Run the ``ground`` job of the job file ``job``; its outcome to XCom (``outcome``).

    ``overrides``: as ``ground run --set`` (``["limits.budget_usd=5"]``, or a mapping of
    ``section.key`` to a value), for example the database per environment; ``limit`` /
    ``sample``: a trial of the first N questions, or of a sample of N; ``some_failed``: what
    exit status 3 does (``"fail"`` or ``"warn"``); ``deferrable``: wait on a batch-mode job's
    batches in the triggerer (:class:`GroundBatchTrigger`), asking every ``poll_interval_s``.
    ``job``, ``overrides``, ``limit`` and ``sample`` are templated.
    """

    template_fields: Collection[str] = ("job", "overrides", "limit", "sample")
    ui_color = "#e8f4ea"

    def __init__(
        self,
        *,
        job: str,
        overrides: Sequence[str] | Mapping[str, Any] = (),
        limit: int | None = None,
        sample: int | None = None,
        some_failed: SomeFailed = "fail",
        deferrable: bool = False,
        poll_interval_s: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if some_failed not in ("fail", "warn"):
            raise ValueError(f'some_failed: "fail" or "warn", not {some_failed!r}')
        self.job = job
        self.overrides = overrides if isinstance(overrides, Mapping) else list(overrides)
        self.limit = limit
        self.sample = sample
        self.some_failed: SomeFailed = some_failed
        self.deferrable = deferrable
        self.poll_interval_s = poll_interval_s

    def execute(self, context: Context) -> None:
        overrides = with_no_wait(self.overrides) if self.deferrable else self.overrides
        outcome = self._run(context, overrides)
        if self.deferrable and outcome["exit_status"] == ExitStatus.OK:
            try:
                waiting = running_batches(self.job, overrides=self.overrides)
            except GroundError as exc:
                raise AirflowException(f"ground: job {self.job!r}: {exc}") from None
            if waiting:
                log.info("ground: %d batches running; deferring: %s", len(waiting), waiting)
                self.defer(
                    trigger=GroundBatchTrigger(
                        job=self.job, overrides=self.overrides, poll_interval_s=self.poll_interval_s
                    ),
                    method_name="execute_complete",
                )
        settle(outcome, some_failed=self.some_failed)

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> None:
        """Back from :class:`GroundBatchTrigger`: the batches have ended; one more run collects
        their results (and does what batch mode leaves to an online run)."""
        if event is not None and event.get("status") == "error":
            raise AirflowException(f"ground: job {self.job!r}: {event.get('message')}")
        settle(self._run(context, self.overrides), some_failed=self.some_failed)

    def _run(
        self, context: Context, overrides: Sequence[str] | Mapping[str, Any]
    ) -> dict[str, Any]:
        """The job run (or refused) to the end; its outcome, pushed to XCom."""
        try:
            outcome = run_job(self.job, limit=self.limit, sample=self.sample, overrides=overrides)
            found = outcome.to_dict()
        except GroundError as exc:
            found = refused_outcome(self.job, exc)
        ti = context.get("ti")  # always there in a task; the type says it may not be
        if ti is not None:
            ti.xcom_push(key=XCOM_KEY, value=found)
        return found


class GroundBatchTrigger(BaseTrigger):
    """Waits, in Airflow's triggerer, until the submitted batches of the job of the job file
    ``job`` have all ended at the Batch API; asks every ``poll_interval_s``. Fires once:
    ``{"status": "ended"}``, or ``{"status": "error", "message": ...}`` when the job or its
    database cannot be read."""

    def __init__(
        self,
        job: str,
        overrides: Sequence[str] | Mapping[str, Any] = (),
        poll_interval_s: float = 60.0,
    ) -> None:
        super().__init__()
        self.job = job
        self.overrides = dict(overrides) if isinstance(overrides, Mapping) else list(overrides)
        self.poll_interval_s = poll_interval_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"job": self.job, "overrides": self.overrides, "poll_interval_s": self.poll_interval_s},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                waiting = await running_batches_async(self.job, overrides=self.overrides)
            except GroundError as exc:
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            if not waiting:
                yield TriggerEvent({"status": "ended", "job": self.job})
                return
            self.log.info("ground: %d batches still running: %s", len(waiting), waiting)
            await asyncio.sleep(self.poll_interval_s)
