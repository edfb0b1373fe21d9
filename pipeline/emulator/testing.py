"""Run the emulator in a background thread, for tests and scripts.

::

    with running_emulator(EmulatorConfig(seed=7)) as emu:
        url = f"{emu.base_url}/v1beta/models/gemini-3.8-flash:generateContent"
        ...  # any client, sync or async, on any event loop
        assert emu.stats()["requests"]["by_status"]["200"] == 1

Pass ``clock=FakeClock()`` (:mod:`pipeline.emulator.clock`) to make links expire and quota
windows pass by ``emu.clock.advance(seconds)`` instead of by waiting; ``emu.hold()`` keeps
every generateContent request waiting until ``emu.release()``.

The server has its own event loop in its own thread, bound to 127.0.0.1 on a free port, so
it works from sync tests and from async tests (whose loop it never shares). Leaving the
block stops it; in-flight requests (a hang fault, say) are cancelled after
:data:`SHUTDOWN_GRACE_S`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from pipeline.emulator.clock import SYSTEM_CLOCK, Clock
from pipeline.emulator.config import DEFAULT_BEARER_TOKEN, EmulatorConfig
from pipeline.emulator.server import EMULATOR, build_app

__all__ = [
    "RunningEmulator",
    "running_emulator",
]

HOST = "127.0.0.1"
SHUTDOWN_GRACE_S = 0.5  # seconds in-flight handlers get before being cancelled
START_TIMEOUT_S = 10.0  # seconds
CALL_TIMEOUT_S = 10.0  # seconds, for stats()/reset() round trips to the server thread


@dataclass
class RunningEmulator:
    """A live emulator: ``base_url`` has no trailing slash."""

    base_url: str
    config: EmulatorConfig
    _loop: asyncio.AbstractEventLoop = field(repr=False)
    _app: web.Application = field(repr=False)

    @property
    def api_key(self) -> str:
        """A valid Developer API key (the smallest of ``config.api_keys``)."""
        return min(self.config.api_keys)

    @property
    def bearer_token(self) -> str:
        """A valid static Vertex Bearer token."""
        toks = self.config.bearer_tokens
        return DEFAULT_BEARER_TOKEN if DEFAULT_BEARER_TOKEN in toks else min(toks)

    @property
    def clock(self) -> Clock:
        """The clock the server reads (advance it when it is a ``FakeClock``)."""
        return self._app[EMULATOR].clock

    def _call(self, fn: Any) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(CALL_TIMEOUT_S)

    def stats(self) -> dict[str, Any]:
        """A snapshot of the counters (the body of ``GET /emulator/stats``)."""
        return self._call(self._app[EMULATOR].snapshot)

    def reset(self) -> None:
        """Zero the counters and empty every quota window."""
        self._call(self._app[EMULATOR].reset)

    def hold(self) -> None:
        """Keep generateContent requests waiting (counted in stats) until :meth:`release`."""
        self._call(self._app[EMULATOR].hold)

    def release(self) -> None:
        """Answer the held requests, and every later one as usual."""
        self._call(self._app[EMULATOR].release)

    def hold_batch(self, stage: str, *, after: int = 0) -> None:
        """Stop the Batch API at ``stage`` (upload, create, poll, download): see
        :mod:`pipeline.emulator.batch`. ``stats()["batch"]["held_<stage>"]`` counts arrivals.
        ``after``: let that many through first (hold the second batch's create with 1)."""
        self._call(lambda: self._app[EMULATOR].batch.hold(stage, after=after))

    def release_batch(self, stage: str) -> None:
        self._call(lambda: self._app[EMULATOR].batch.release(stage))

    def hold_vertex_batch(self, stage: str, *, after: int = 0) -> None:
        """Stop Vertex batch prediction at ``stage``: ``upload`` or ``download`` (Cloud
        Storage, see :mod:`pipeline.emulator.storage`), ``create`` or ``poll`` (the jobs, see
        :mod:`pipeline.emulator.prediction`). ``stats()["storage"|"prediction"]["held_<stage>"]``
        counts arrivals. ``after`` (Cloud Storage): let that many through first, e.g. hold
        ``download`` in the second output file with ``after=1``."""
        service = self._vertex_service(stage)
        if after:
            self._call(lambda: service.hold(stage, after=after))
        else:
            self._call(lambda: service.hold(stage))

    def release_vertex_batch(self, stage: str) -> None:
        self._call(lambda: self._vertex_service(stage).release(stage))

    def _vertex_service(self, stage: str) -> Any:
        emulator = self._app[EMULATOR]
        return emulator.storage if stage in ("upload", "download") else emulator.prediction


@contextmanager
def running_emulator(
    config: EmulatorConfig | None = None, *, clock: Clock = SYSTEM_CLOCK
) -> Iterator[RunningEmulator]:
    """Start an emulator on 127.0.0.1:<free port>; stop it when the block exits."""
    cfg = config or EmulatorConfig()
    app = build_app(cfg, clock=clock)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(
        app, handler_cancellation=True, shutdown_timeout=SHUTDOWN_GRACE_S, access_log=None
    )
    ready = threading.Event()
    port: list[int] = []
    failure: list[BaseException] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, HOST, 0)
            loop.run_until_complete(site.start())
            port.append(runner.addresses[0][1])
        except BaseException as exc:  # reported to the caller's thread
            failure.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()

    thread = threading.Thread(target=serve, name="gemini-emulator", daemon=True)
    thread.start()
    if not ready.wait(START_TIMEOUT_S):
        raise RuntimeError("emulator did not start")
    if failure:
        raise RuntimeError("emulator failed to start") from failure[0]
    try:
        yield RunningEmulator(f"http://{HOST}:{port[0]}", cfg, loop, app)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(START_TIMEOUT_S)
