"""Resolving redirect URIs to their destinations, before the redirects expire.

For each pending source on an allow-listed redirect host: ``GET`` with redirects off, read
``Location``, store the destination. ``GET``, not ``HEAD``: aiohttp's client closes the
connection after a ``HEAD`` response without ``Content-Length`` (which RFC 9110 allows, and
aiohttp's own server sends), so every lookup paid a new connection, a TLS handshake on a real
redirect host (aio-libs/aiohttp#1769 fixed the case with the header). A redirect's body is small
and read (up to :data:`MAX_BODY_BYTES`) so the connection is reused.

The destination is **never** requested: a ``Location`` on an allow-listed host is followed (at
most :data:`MAX_HOPS` hops), any other is recorded and the walk stops there.

* 404/410 -> ``expired``; 403 -> ``forbidden`` (retried once, by a later sweep); timeouts,
  connection errors and 5xx -> retried with backoff, then ``failed``, as the retry policy
  (:func:`resolver_policy`, injectable) decides.
* The same URI is resolved once per run: concurrent requests for it share one lookup, and
  results are remembered in a bounded LRU.
* :class:`Resolver` runs inside ``ground run`` as a feed (answers are resolved within seconds of
  being stored) and in ``ground resolve`` / the start-up sweep over whatever is left.

The HTTP session is the resolver's own: no cookies, no credentials, no headers but the user
agent. A link is requested with its host in canonical form and without any ``user:password@``
it was written with (:meth:`pipeline.links.rules.AllowList.request_url`), so no Basic
credentials ever leave with it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import aiohttp
import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.streams.memory import MemoryObjectReceiveStream

from pipeline.clock import utcnow
from pipeline.errors import ErrorClass, RetryableError
from pipeline.gemini.session import SessionOwner
from pipeline.job.sections import ResolverSection
from pipeline.job.states import SourceState, Verdict
from pipeline.limits.backoff import Backoff
from pipeline.limits.policy import RetryPolicy
from pipeline.limits.rate import RateLimiter
from pipeline.links import rules as redirects
from pipeline.links.rules import AllowList
from pipeline.redaction import redact
from pipeline.run.commit_window import batches
from pipeline.store import resolution
from pipeline.store.database import Database
from pipeline.store.resolution import Lookup, SourceUpdate

__all__ = [
    "Lookup",
    "Resolver",
    "pending_lookups",
]

log = logging.getLogger(__name__)

MAX_HOPS = 3  # redirects followed on allow-listed hosts before giving up
TRANSIENT_RETRIES = 3  # extra tries for timeouts, connection errors and 5xx
RETRY_BASE_S = 0.5  # full-jitter backoff before a transient retry: base, doubled each time ...
RETRY_CAP_S = 4.0  # ... up to this cap, in seconds
RESOLVE = "resolve"  # the step name the retry policy is asked about
FORBIDDEN_ATTEMPTS = 2  # a 403 is tried this many times in all (the second by a later sweep)
CACHE_ENTRIES = 8_192  # resolved URIs remembered (LRU): bounded memory, whatever the job size
WRITE_BATCH_MAX = 500  # source updates per transaction at most (the commit window's K)
# The commit window: after the first result, the writer waits up to this many seconds for more
# before committing, unless no lookup is under way (nothing else is coming). Nobody waits on a
# resolution's commit, so the window can be longer than the run's writer's.
WRITE_LINGER_S = 0.5
MAX_BODY_BYTES = 16_384  # a redirect's own body is read (to reuse the connection) up to this


@dataclass(frozen=True, slots=True)
class LookupResult:
    """Where one redirect chain ended, and the last HTTP status seen on the way."""

    verdict: Verdict
    http_status: int | None = None


@dataclass(frozen=True, slots=True)
class ResolvedSource:
    lookup: Lookup
    outcome: LookupResult
    resolved_at: dt.datetime


class RedirectClient(SessionOwner):
    """Follows one redirect chain with GET, never leaving the allow-list."""

    __slots__ = ("_allow", "_limiter", "_policy")

    def __init__(
        self, settings: ResolverSection, allow: AllowList, *, policy: RetryPolicy | None = None
    ) -> None:
        self._allow = allow
        self._policy = policy or resolver_policy()
        self._limiter = RateLimiter(settings.requests_per_second)  # evenly spaced, no burst
        super().__init__(
            timeout=aiohttp.ClientTimeout(total=settings.timeout_s), limit=settings.concurrency
        )

    async def resolve(self, uri: str) -> LookupResult:
        """Walk the redirect chain from ``uri``; a transient failure (timeout, connection
        error, 408/429/5xx) is walked again after the delay the retry policy decides, and
        stored as a ``failed`` source when it decides to give up."""
        attempts = 0
        while True:
            outcome = await self._walk(uri)
            if outcome.verdict.status != _TRANSIENT:
                return outcome
            attempts += 1
            reason = outcome.verdict.reason or "transient failure"
            decision = self._policy.decide(LookupFailed(reason), attempts, RESOLVE)
            if not decision.retry or decision.state is None:
                return LookupResult(Verdict(SourceState.FAILED, None, reason), outcome.http_status)
            await anyio.sleep(decision.delay_s)

    async def _walk(self, uri: str) -> LookupResult:
        url = uri
        for _hop in range(MAX_HOPS):
            # Checked again before every request, and requested as the check read it: the
            # canonical host, without any user:password@ (never sent).
            request = self._allow.request_url(url)
            if request is None:
                return LookupResult(redirects.rejected(url, "host is not allow-listed"))
            try:
                status, location = await self._ask(request)
            except TimeoutError:
                return LookupResult(Verdict(_TRANSIENT, None, "timed out"))
            except aiohttp.ClientError as exc:
                reason = redact(f"{type(exc).__name__}: {exc}")
                return LookupResult(Verdict(_TRANSIENT, None, reason))
            if status in (404, 410):
                return LookupResult(Verdict(SourceState.EXPIRED, None, f"HTTP {status}"), status)
            if status == 403:
                return LookupResult(Verdict(SourceState.FORBIDDEN, None, "HTTP 403"), status)
            if status >= 500 or status in (408, 429):
                return LookupResult(Verdict(_TRANSIENT, None, f"HTTP {status}"), status)
            if not 300 <= status < 400 or location is None:
                return LookupResult(
                    Verdict(SourceState.FAILED, None, f"HTTP {status} without a redirect"), status
                )
            target = redirects.resolve_location(location, request)
            if self._allow.allows(target):
                url = target
                continue
            problem = redirects.check_destination(target)
            if problem is not None:
                return LookupResult(redirects.rejected(target, problem), status)
            return LookupResult(Verdict(SourceState.RESOLVED, target), status)
        return LookupResult(Verdict(SourceState.FAILED, None, f"more than {MAX_HOPS} redirects"))

    async def _ask(self, url: str) -> tuple[int, str | None]:
        await self._limiter.acquire()
        async with self._session.get(url, allow_redirects=False) as response:
            status, location = response.status, response.headers.get("Location")
            length = response.content_length
            if length is not None and length <= MAX_BODY_BYTES:
                # Drained, the connection goes back to the pool; a body that fails to arrive
                # only costs the connection, not the Location already read.
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    await response.read()
        return status, location


_TRANSIENT = "_transient"  # internal: retried by RedirectClient.resolve, never stored


class LookupFailed(RetryableError):
    """A lookup that may succeed if tried again, as the retry policy sees it."""

    error_class = ErrorClass.RESOLVE_TRANSIENT


def resolver_policy(backoff: Backoff | None = None) -> RetryPolicy:
    """The resolver's retry policy: :data:`TRANSIENT_RETRIES` retries with a short backoff,
    then give up (the source is stored ``failed``)."""
    return RetryPolicy(
        max_attempts=TRANSIENT_RETRIES + 1,
        backoff=backoff or Backoff(base_s=RETRY_BASE_S, cap_s=RETRY_CAP_S),
    )


class Resolver:
    """Resolves lookups with bounded concurrency, coalescing and caching by URI, and writes
    the results in batches. :meth:`serve` takes its lookups from a stream: the run's in-memory
    feed, or :func:`pending_lookups` (a sweep of the database)."""

    def __init__(
        self, db: Database, settings: ResolverSection, *, policy: RetryPolicy | None = None
    ) -> None:
        """``db``: the job's database (the run's, so its writes ride out an outage as the
        run's do)."""
        self.db = db
        self.settings = settings
        self.policy = policy or resolver_policy()
        self.allow = AllowList(settings.allow_hosts)
        self.counts: dict[str, int] = {}
        # Told each stored resolution's lag (answer stored -> destination stored), in seconds.
        self.on_resolved: Callable[[float], None] | None = None
        self._cache: OrderedDict[str, LookupResult] = OrderedDict()
        self._inflight: dict[str, anyio.Event] = {}
        self._client: RedirectClient | None = None
        self._busy = 0  # lookups under way (their result is still to come)

    def __repr__(self) -> str:
        return f"Resolver(allow={sorted(self.settings.allow_hosts)})"

    async def serve(self, lookups: MemoryObjectReceiveStream[Lookup]) -> None:
        """Resolve everything received on ``lookups`` until it is closed, then flush."""
        results_send, results_recv = anyio.create_memory_object_stream[ResolvedSource](
            self.settings.concurrency * 4
        )
        async with RedirectClient(self.settings, self.allow, policy=self.policy) as client:
            self._client = client
            async with anyio.create_task_group() as group:
                group.start_soon(self._writer, results_recv)
                async with anyio.create_task_group() as workers:
                    for _ in range(self.settings.concurrency):
                        workers.start_soon(self._work, lookups.clone(), results_send.clone())
                    lookups.close()
                    results_send.close()

    async def _work(
        self, lookups: ObjectReceiveStream[Lookup], results: ObjectSendStream[ResolvedSource]
    ) -> None:
        async with lookups, results:
            async for lookup in lookups:
                self._busy += 1
                try:
                    outcome = await self._resolve_once(lookup.uri)
                finally:
                    self._busy -= 1
                await results.send(ResolvedSource(lookup, outcome, utcnow()))

    async def _resolve_once(self, uri: str) -> LookupResult:
        if not self.allow.allows(uri):  # e.g. the allow-list changed since it was stored
            return LookupResult(redirects.initial_verdict(uri, self.allow))
        cached = self._cache.get(uri)
        if cached is not None:
            self._cache.move_to_end(uri)
            return cached
        waiting = self._inflight.get(uri)
        if waiting is not None:  # someone is resolving this URI right now: share the answer
            await waiting.wait()
            cached = self._cache.get(uri)
            if cached is not None:
                return cached
        done = self._inflight[uri] = anyio.Event()
        try:
            assert self._client is not None
            outcome = await self._client.resolve(uri)
            self._cache[uri] = outcome
            if len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
            return outcome
        finally:
            del self._inflight[uri]
            done.set()

    async def _writer(self, results: MemoryObjectReceiveStream[ResolvedSource]) -> None:
        async for batch in batches(
            results, WRITE_BATCH_MAX, linger_s=WRITE_LINGER_S, flush_early=self._idle
        ):
            with anyio.CancelScope(shield=True):
                await self._store(batch)

    def _idle(self) -> bool:
        return self._busy == 0

    async def _store(self, batch: Sequence[ResolvedSource]) -> None:
        updates = []
        for item in batch:
            verdict = item.outcome.verdict
            latency = item.resolved_at - item.lookup.persisted_at
            updates.append(
                SourceUpdate(
                    item.lookup.answer_id,
                    item.lookup.chunk_index,
                    verdict,
                    item.outcome.http_status,
                    item.lookup.attempts + 1,
                    item.resolved_at,
                    latency.total_seconds() * 1000.0,
                    item.lookup.first_version,
                )
            )
            self.counts[verdict.status] = self.counts.get(verdict.status, 0) + 1
            if self.on_resolved is not None:
                self.on_resolved(latency.total_seconds())

        # A database that goes away mid-run (a restart, a failover) is waited for.
        await self.db.transaction(
            "storing resolutions", lambda c: resolution.store_resolutions(c, updates)
        )


def pending_lookups(
    db: Database, job_id: int, *, stored_before: dt.datetime | None = None
) -> AsyncIterator[Lookup]:
    """Sources of ``job_id`` still to resolve (pending, or forbidden fewer than
    :data:`FORBIDDEN_ATTEMPTS` times), read in batches.

    ``stored_before`` limits the sweep to answers stored before a run began, so a start-up
    sweep does not race the run's own feed.
    """
    return resolution.pending_lookups(
        db, job_id, forbidden_attempts=FORBIDDEN_ATTEMPTS, stored_before=stored_before
    )
