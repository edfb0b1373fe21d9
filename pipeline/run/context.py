"""What one run shares, online and in batch mode: its database, prices, retry policy, stop and
summary.

* :class:`RunPrices`: the price of each model the run calls, at the online or the batch rate,
  looked up once and warned about once (a model with no price is recorded at cost 0 and
  marked incomplete; a price resting on placeholder figures is named).
* :class:`RunContext`: the job's id, its :class:`~pipeline.store.database.Database` (every
  transaction of the run goes through it and rides out a database restart), the prices, the
  one retry policy, the budget and the worst case a call holds in it, the run's
  :class:`~pipeline.run.summary.RunSummary`, and :meth:`~RunContext.stop`.

The job file stops here: :func:`run_context` reads what the run shares from the spec, and the
runners take the values they use.
"""

from __future__ import annotations

import datetime as dt
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.costs.cap import cap_micro
from pipeline.costs.charges import WorstCase
from pipeline.costs.labels import label_value
from pipeline.costs.prices import Price, PriceTable, UnconfirmedPriceWarning, load_prices
from pipeline.job import sections
from pipeline.job.calls import worst_case
from pipeline.job.spec import JobSpec
from pipeline.limits.backoff import Backoff
from pipeline.limits.policy import RetryPolicy
from pipeline.limits.probe import ProbeSettings
from pipeline.redaction import redact
from pipeline.run.spill import SpillFile, spill_path, spill_prefix, state_directory
from pipeline.run.summary import RunSummary
from pipeline.store import notify_deliveries
from pipeline.store.database import Database, FileIdentity
from pipeline.store.engine import display_url, sqlite_file

__all__ = [
    "RunContext",
    "RunPrices",
    "job_spill_prefix",
    "run_context",
]

log = logging.getLogger(__name__)


class RunPrices:
    """The run's price lookups: each model's row, at the online or the batch rate, warned
    about once."""

    def __init__(self, table: PriceTable, backend: str, tools: Sequence[str]) -> None:
        self._table = table
        self._backend = backend
        self._tools = tuple(tools)
        self._online: dict[str, Price | None] = {}
        self._batch: dict[str, Price | None] = {}

    @classmethod
    def load(cls, prices_file: str, backend: str, tools: Sequence[str]) -> RunPrices:
        """The bundled table, or ``prices_file``; only the rows this job uses are warned about
        (when they are looked up), not every placeholder in the file."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnconfirmedPriceWarning)
            return cls(load_prices(prices_file or None), backend, tools)

    def online(self, model: str) -> Price | None:
        """The model's online price; None (warned once) when the table has none."""
        if model not in self._online:
            price = self._table.for_model(model, self._backend)
            self._online[model] = price
            if price is None:
                _missing(f"no price for {model} ({self._backend})", model)
            elif not price.confirmed_for(self._tools):
                log.warning(
                    "the price of %s rests on placeholder figures: %s",
                    model,
                    price.describe(),
                    extra={"action": "price_unconfirmed", "model": model},
                )
        return self._online[model]

    def batch(self, model: str) -> Price | None:
        """The model's batch price; None (warned once) when the table has none."""
        if model not in self._batch:
            price = self._table.for_batch(model, self._backend)
            self._batch[model] = price
            if price is None:
                _missing(f"no batch price for {model}", model)
        return self._batch[model]


def _missing(what: str, model: str) -> None:
    log.warning(
        "%s: its calls are recorded at cost 0, marked incomplete",
        what,
        extra={"action": "price_missing", "model": model},
    )


class RunContext:
    """One run's shared state, online and in batch mode (see the module docstring).

    ``budget_micro``: the job's budget (None: no budget); ``worst_case``: the bounds of one
    call, under which a call (online) or a batch holds the budget before it is sent.
    """

    def __init__(
        self,
        db: Database,
        job_id: int,
        *,
        prices: RunPrices,
        policy: RetryPolicy,
        budget_micro: int | None,
        worst_case: WorstCase,
        spill: SpillFile | None = None,
    ) -> None:
        """``spill``: where outcomes the database cannot take are kept (pipeline.run.spill)."""
        self.db = db
        self.job_id = job_id
        self.prices = prices
        self.policy = policy
        self.budget_micro = budget_micro
        self.worst_case = worst_case
        self.summary = RunSummary()
        self.spill = spill
        # A stopping run no longer waits a lost database out: what it cannot store is kept.
        self._on_stop: list[Callable[[], None]] = [db.give_up]
        # A trial run (--limit/--sample): the claim's extra condition; None: the whole job.
        self.scope: sa.ColumnElement[bool] | None = None
        # [job] reuse_answers_within: how old a reused answer may be; None: reuse is off.
        self.reuse_within: dt.timedelta | None = None
        # [limits] max_cost_per_question_usd in micro-dollars; None: no cap.
        self.question_cap_micro: int | None = None
        # [notify]: which events are written (pipeline.notify delivers them), of which job.
        self.notify = sections.NotifySection()
        self.job_name = ""
        # Billing labels of every Vertex request: [job] labels and ground_job (ground_run and
        # ground_step are added per process and per call; pipeline.costs.labels).
        self.labels: dict[str, str] = {}

    @property
    def stopped(self) -> str | None:
        """Why the run is stopping, or None while it goes on."""
        return self.summary.stopped

    def stop(self, reason: str) -> None:
        """Stop: nothing new is started; what is under way finishes and is stored. The first
        reason is kept; the run's parts that wait are woken (:meth:`on_stop`). The reason
        is redacted (it may quote a server or a library, and it is printed and stored)."""
        if self.summary.stopped is not None:
            return
        reason = redact(reason)
        log.warning("stopping: %s", reason, extra={"action": "stop", "reason": reason})
        self.summary.stopped = reason
        for wake in self._on_stop:
            wake()

    def on_stop(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` when the run is told to stop."""
        self._on_stop.append(wake)

    async def record_event(
        self, connection: AsyncConnection, name: str, data: Mapping[str, Any]
    ) -> None:
        """Write the webhook event ``name`` in the caller's transaction, when ``[notify]``
        sends it: it is delivered once that commits (:mod:`pipeline.notify.outbox`)."""
        if self.notify.sends(name):
            document = {"job": self.job_name, **data}
            now = dt.datetime.now(dt.UTC)
            await notify_deliveries.record_event(connection, self.job_id, name, document, now)


def run_context(
    spec: JobSpec,
    engine: AsyncEngine,
    job_id: int,
    *,
    backoff: Backoff | None = None,
    daily_probe: ProbeSettings | None = None,
) -> RunContext:
    """The context of one run of ``spec``. ``backoff``: the retry delays, those of overload
    storms too; ``daily_probe``: how long bare 429s must persist before a day's pause (tests
    shorten both)."""
    limits = spec.limits
    database_file = sqlite_file(spec.database_url)
    watched = FileIdentity.of(database_file) if database_file else None
    ctx = RunContext(
        Database(engine, outage_s=spec.job.database_outage_s, file=watched),
        job_id,
        prices=RunPrices.load(limits.prices_file, spec.model.backend, spec.grounding.tools),
        policy=RetryPolicy(
            max_attempts=limits.max_attempts,
            backoff=backoff,
            overload_wait_s=limits.overload_wait_s,
            overload_backoff=backoff,
            daily_probe=daily_probe,
        ),
        budget_micro=int(spec.budget * 1_000_000) if spec.budget is not None else None,
        worst_case=worst_case(spec),
        spill=SpillFile(spill_path(job_spill_prefix(spec))),
    )
    ctx.reuse_within = spec.reuse_within
    ctx.question_cap_micro = cap_micro(limits.max_cost_per_question_usd)
    ctx.notify, ctx.job_name = spec.notify, spec.name
    ctx.labels = {**spec.job.labels, "ground_job": label_value(spec.name)}
    return ctx


def job_spill_prefix(spec: JobSpec) -> Path:
    """Where the spill files of ``spec``'s job on its database go (:mod:`pipeline.run.spill`)."""
    state_dir = state_directory(spec.job.state_dir, spec.path.parent)
    return spill_prefix(state_dir, spec.name, display_url(spec.database_url))
