"""A local webhook receiver for ``[notify]``'s tests: it keeps every POST, answers 503 to the
first ``fail_first``, can hold requests unanswered (a receiver that hangs), and verifies what
it accepted with the ``standardwebhooks`` library's own verifier."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks import Webhook

SECRET_ENV = "GROUND_TEST_WEBHOOK_SECRET"
SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


@dataclass
class Delivery:
    """One POST as received, and the status answered (None: held, never answered)."""

    headers: dict[str, str]
    body: bytes
    status: int | None


@dataclass
class Receiver:
    """A webhook endpoint: answers 503 to the first ``fail_first`` POSTs, holds every POST
    unanswered while ``hold`` is set (its status stays None), and ``status`` to the others."""

    fail_first: int = 0
    status: int = 204
    hold: bool = False
    received: list[Delivery] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        delivery = Delivery(dict(request.headers), await request.read(), None)
        self.received.append(delivery)
        if self.hold:  # held until released, then never counted as answered
            while self.hold:
                await asyncio.sleep(0.05)
            return web.Response(status=503)
        delivery.status = 503 if len(self.received) <= self.fail_first else self.status
        return web.Response(status=delivery.status)

    def accepted(self) -> list[Delivery]:
        """The deliveries answered with a 2xx."""
        return [d for d in self.received if d.status is not None and 200 <= d.status < 300]

    def events(self) -> list[dict[str, Any]]:
        """Each accepted delivery's event, verified by the library (raises if one is not)."""
        verifier = Webhook(SECRET)
        return [verifier.verify(d.body, d.headers) for d in self.accepted()]

    def types(self) -> list[str]:
        return sorted(event["type"] for event in self.events())


def notify_overrides(url: str, *more: str) -> list[str]:
    """``--set`` values that point ``[notify]`` at ``url`` with the test secret."""
    return [f'notify.url="{url}"', f'notify.secret_env="{SECRET_ENV}"', *more]


@contextmanager
def receiving(receiver: Receiver) -> Iterator[str]:
    """``receiver`` served on 127.0.0.1 in a thread of its own; its URL."""
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
