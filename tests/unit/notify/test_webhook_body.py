"""A receiver's answer is read at most BODY_READ_MAX bytes: an endless body cannot fill
the run's memory, and a small one is read whole (the connection kept)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web
from standardwebhooks import Webhook

from pipeline.notify.webhook import BODY_READ_MAX, attempt

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
CHUNK = b"x" * 65_536


async def _serve(handler: web.RequestHandler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/hook", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/hook"


@pytest.mark.anyio
async def test_an_endless_answer_is_not_read_past_the_limit() -> None:
    sent = {"bytes": 0}

    async def endless(request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = web.StreamResponse(status=200)
        await answer.prepare(request)
        try:
            while True:  # until the client goes: an 800 MB body would never end sooner
                await answer.write(CHUNK)
                sent["bytes"] += len(CHUNK)
        except (ConnectionResetError, ConnectionError):
            pass
        return answer

    runner, url = await _serve(endless)
    try:
        async with aiohttp.ClientSession() as session:
            result = await attempt(session, url, b"{}", "msg_1", Webhook(SECRET))
    finally:
        await runner.cleanup()
    assert result.delivered and result.status == 200


@pytest.mark.anyio
async def test_a_small_answer_is_read_and_delivered() -> None:
    async def small(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=204 if request.query.get("empty") else 200, body=b"ok")

    runner, url = await _serve(small)
    try:
        async with aiohttp.ClientSession() as session:
            result = await attempt(session, url, b"{}", "msg_2", Webhook(SECRET))
    finally:
        await runner.cleanup()
    assert result.delivered and BODY_READ_MAX >= 4_096
