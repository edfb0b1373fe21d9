"""The model call against servers that misbehave at the transport: every failure is the API
edge's typed error, named by host, with the key in no message."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from pipeline.errors import ErrorClass
from pipeline.gemini import client as client_module
from pipeline.gemini.api_errors import PermanentError, TransientError, Unreachable
from pipeline.gemini.client import GeminiClient
from pipeline.gemini.endpoint import ApiKeyAuth, Endpoint

pytestmark = pytest.mark.anyio

KEY = "AIza-transport-secret"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[Endpoint]:
    """A raw TCP server on a free port answering each connection with ``handler``."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1beta/models/m:generateContent"
    try:
        yield Endpoint(url, ApiKeyAuth(KEY))
    finally:
        server.close()


def _head(length: int, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    ).encode()


async def _call(endpoint: Endpoint, timeout_s: float = 30.0) -> BaseException:
    async with GeminiClient(max_connections=1, timeout_s=timeout_s) as client:
        with pytest.raises((TransientError, PermanentError, Unreachable)) as caught:
            await client.generate(endpoint, b"{}")
    assert KEY not in str(caught.value)
    return caught.value


async def test_a_body_cut_short_is_truncated() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_head(1000) + b'{"candidates": [')
        await writer.drain()

    async with serving(cut) as endpoint:
        error = await _call(endpoint)
    assert isinstance(error, TransientError)
    assert error.error_class is ErrorClass.TRUNCATED
    assert "127.0.0.1" in str(error)


async def test_a_connection_closed_before_any_answer_is_a_connection_failure() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        return None

    async with serving(hang_up) as endpoint:
        error = await _call(endpoint)
    assert isinstance(error, TransientError)
    assert error.error_class is ErrorClass.CONNECTION
    assert "127.0.0.1" in str(error)


async def test_a_server_that_never_answers_times_out() -> None:
    answered = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answered.wait()

    async with serving(silent) as endpoint:
        error = await _call(endpoint, timeout_s=0.3)
        answered.set()
    assert isinstance(error, TransientError)
    assert error.error_class is ErrorClass.TIMEOUT
    assert "127.0.0.1" in str(error)
    assert "within 0.3 s" in str(error)


async def test_nothing_listening_is_unreachable() -> None:
    async with serving(lambda reader, writer: asyncio.sleep(0)) as endpoint:
        pass  # the server is closed: its port no longer listens
    error = await _call(endpoint)
    assert isinstance(error, Unreachable)
    assert "127.0.0.1" in str(error)


async def test_an_oversized_body_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "MAX_BODY_BYTES", 1024)

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(8):
            writer.write(b"200\r\n" + b" " * 512 + b"\r\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with serving(flood) as endpoint:
        error = await _call(endpoint)
    assert isinstance(error, PermanentError)
    assert error.error_class is ErrorClass.OVERSIZED_RESPONSE


async def test_a_200_that_is_not_json_is_asked_again() -> None:
    async def html(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = b"<html>proxy says hello</html>"
        writer.write(_head(len(body)) + body)
        await writer.drain()

    async with serving(html) as endpoint:
        error = await _call(endpoint)
    assert isinstance(error, TransientError)
    assert error.error_class is ErrorClass.MALFORMED_RESPONSE
