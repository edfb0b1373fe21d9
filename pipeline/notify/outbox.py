"""``[notify]``'s deliverer: events are written to the job's database when they happen
(:mod:`pipeline.store.notify_deliveries`), then sent from there by a task beside the run.

* **Durable, once.** An event is a row before it is sent; a run that dies before it is
  delivered leaves it ``pending``, and the next run of the job (or ``ground verify``) sends
  it, with the same ``webhook-id``. An attempt first claims its row (a conditional update
  whose lease outlasts the attempt's timeout), so two processes never send one event.
* **Bounded.** An attempt that may be tried again is, after 1, 2, 4 ... s, up to
  ``[notify] attempts`` in all (counted across runs); then the event is ``failed``, in one
  log line. At its end a process waits for its job's pending events at most as long as
  that schedule takes (:func:`drain_bound_s`), then leaves the rest to the next run.
* **Never blocking, never failing.** Sending runs beside the work; an error of the receiver
  or of the database is a log line, and the run's exit status is the run's.
* **One connection.** The deliverer has an engine of its own on the job's database, used by
  one task at a time: one more database connection per process while a run lasts.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anyio
from anyio.abc import TaskGroup
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks import Webhook

from pipeline.clock import utcnow
from pipeline.job import sections
from pipeline.notify.event import run_event
from pipeline.notify.webhook import Attempt, attempt, not_delivered, signer_from_env
from pipeline.redaction import redact
from pipeline.run.outcome import RunOutcome
from pipeline.store import notify_deliveries as nd
from pipeline.store.engine import create_engine

__all__ = [
    "Outbox",
    "drain_bound_s",
    "notifying",
]

log = logging.getLogger(__name__)

BACKOFF_S = 1.0  # the first wait before another attempt; doubled after each
POLL_S = 0.5  # how often the deliverer looks for events written by others (a batch's)
LEASE_MARGIN_S = 1.0  # a claim outlasts the attempt's timeout by this much


def drain_bound_s(notify: sections.NotifySection) -> float:
    """The longest one event's attempts take: each attempt's timeout and lease margin, and
    the waits between them."""
    waits = sum(BACKOFF_S * 2**i for i in range(notify.attempts - 1))
    return notify.attempts * (notify.timeout_s + LEASE_MARGIN_S) + waits


class Outbox:
    """The events of one process on one job: :meth:`emit` / :meth:`record` write them,
    :meth:`deliver_until_drained` sends them. Without ``[notify] url`` it does nothing."""

    def __init__(
        self,
        notify: sections.NotifySection,
        database_url: str,
        tasks: TaskGroup,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.notify = notify
        self._database_url = database_url
        self._tasks = tasks
        self._env = env
        self.job_id: int | None = None
        self._engine: AsyncEngine | None = None
        self._attached = anyio.Event()
        self._wake = anyio.Event()
        self._closing_at: float | None = None
        self._writing = 0  # events being written (emit): the drain waits for them

    def attach(self, job_id: int) -> None:
        """The job's row exists (and the schema is current): events can be written."""
        if not self.notify.url or self.job_id is not None:
            return
        self.job_id = job_id
        self._engine = create_engine(self._database_url)
        self._attached.set()

    def emit(self, name: str, data: dict[str, Any]) -> None:
        """Write ``name`` soon, beside the caller (for callbacks that cannot wait)."""
        if self.notify.sends(name) and self.job_id is not None:
            self._writing += 1
            self._tasks.start_soon(self._record_emitted, name, data)

    async def _record_emitted(self, name: str, data: dict[str, Any]) -> None:
        try:
            await self.record(name, data)
        finally:
            self._writing -= 1
            self._wake.set()

    async def record(self, name: str, data: dict[str, Any]) -> None:
        """Write the event ``name`` now, in a transaction of its own. Never raises."""
        if not self.notify.sends(name) or self._engine is None or self.job_id is None:
            return
        job_id = self.job_id
        try:
            async with self._engine.begin() as connection:
                await nd.record_event(connection, job_id, name, data, utcnow())
        except Exception as exc:  # never the run's failure
            log.warning(
                "notify: the %s event could not be written: %s",
                name,
                redact(f"{type(exc).__name__} {exc}"),
                extra={"action": "webhook_unrecorded", "event": name},
            )
            return
        self._wake.set()

    async def run_ended(self, outcome: RunOutcome) -> None:
        """Write the run's end event: ``run.finished`` or ``run.stopped``."""
        name, data = run_event(outcome)
        if self.job_id is None and self.notify.sends(name):
            log.warning(
                "notify: the %s event was not written: the job's database was not reached",
                name,
                extra={"action": "webhook_unrecorded", "event": name},
            )
            return
        await self.record(name, data)

    def close_soon(self) -> None:
        """The work is over: deliver what is pending, within :func:`drain_bound_s`."""
        self._closing_at = anyio.current_time()
        self._attached.set()  # never attached: nothing of this process to send
        self._wake.set()

    async def deliver_until_drained(self) -> None:
        """Send the job's pending events as they come due, until :meth:`close_soon` and then
        none pending (or the bound passed). Never raises (but a cancellation)."""
        if not self.notify.url:
            return
        await self._attached.wait()  # or close_soon: then there is no engine
        if self._engine is None:
            return
        signer = signer_from_env(self.notify.secret_env, self._env)
        if isinstance(signer, str):
            log.warning(
                "notify: events are kept pending for a later run: %s",
                signer,
                extra={"action": "webhook_failed"},
            )
            return
        timeout = aiohttp.ClientTimeout(total=self.notify.timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await self._deliver_loop(session, signer)
        except Exception as exc:  # never the run's failure: what is pending stays so
            log.warning(
                "notify: delivery stopped, pending events wait for the next run: %s",
                redact(f"{type(exc).__name__} {exc}"),
                extra={"action": "webhook_failed"},
            )

    async def _deliver_loop(self, session: aiohttp.ClientSession, signer: Webhook) -> None:
        bound = drain_bound_s(self.notify)
        while True:
            wait_s = await self._deliver_due(session, signer)
            closing = self._closing_at
            drained = wait_s is None and not self._writing
            if closing is not None and (drained or anyio.current_time() - closing > bound):
                return
            await self._wait(POLL_S if wait_s is None else min(max(wait_s, 0.01), POLL_S * 4))

    async def _wait(self, seconds: float | None) -> None:
        with anyio.move_on_after(POLL_S if seconds is None else seconds):
            await self._wake.wait()
        if self._wake.is_set():
            self._wake = anyio.Event()

    async def _deliver_due(self, session: aiohttp.ClientSession, signer: Webhook) -> float | None:
        """Try each due pending event once; the seconds until the next is due (0: one is
        due now), or None when none is pending."""
        assert self._engine is not None and self.job_id is not None
        try:
            async with self._engine.connect() as connection:
                pending = await nd.pending_events(connection, self.job_id)
        except Exception as exc:
            log.debug("notify: the outbox could not be read: %s", redact(str(exc)))
            return POLL_S
        soonest: float | None = None
        for event in pending:
            left = (event.next_at - utcnow()).total_seconds()
            if left > 0:
                soonest = left if soonest is None else min(soonest, left)
                continue
            try:
                await self._try_once(session, signer, event)
            except Exception as exc:  # the database: the event stays pending
                log.debug("notify: an attempt was not recorded: %s", redact(str(exc)))
            soonest = 0.0
        return soonest

    async def _try_once(
        self, session: aiohttp.ClientSession, signer: Webhook, event: nd.PendingEvent
    ) -> None:
        assert self._engine is not None
        now = utcnow()
        lease = now + dt.timedelta(seconds=self.notify.timeout_s + LEASE_MARGIN_S)
        async with self._engine.begin() as connection:
            if not await nd.claim(connection, event.id, now, lease):
                return
        url = self.notify.url
        result = await attempt(session, url, event.body, event.message_id, signer)
        attempts = event.attempts + 1
        async with self._engine.begin() as connection:
            await self._settle(connection, event, result, attempts)
        if not result.delivered and (result.final or attempts >= self.notify.attempts):
            not_delivered(event.event, url, attempts, result.why)

    async def _settle(
        self, connection: Any, event: nd.PendingEvent, result: Attempt, attempts: int
    ) -> None:
        if result.delivered:
            await nd.mark_sent(connection, event.id, utcnow())
        elif result.final or attempts >= self.notify.attempts:
            await nd.mark_failed(connection, event.id, result.why)
        else:
            wait = BACKOFF_S * 2 ** (attempts - 1)
            next_at = utcnow() + dt.timedelta(seconds=wait)
            await nd.mark_retry(connection, event.id, next_at, result.why)

    async def dispose(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()


@asynccontextmanager
async def notifying(
    notify: sections.NotifySection, database_url: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[Outbox]:
    """An :class:`Outbox` whose deliverer runs while the block does; on leaving, it sends
    what is pending within :func:`drain_bound_s`, then stops."""
    failed: Exception | None = None
    tasks = anyio.create_task_group()
    outbox = Outbox(notify, database_url, tasks, env)  # it starts tasks only once entered
    async with tasks:
        tasks.start_soon(outbox.deliver_until_drained)
        try:
            yield outbox
        except Exception as exc:  # the caller's own error, raised as it is (not grouped)
            failed = exc
            tasks.cancel_scope.cancel()  # what is pending waits for the next run
        finally:
            outbox.close_soon()  # the group waits for the deliverer: bounded by drain_bound_s
    await outbox.dispose()
    if failed is not None:
        raise failed
