"""The one owner of an aiohttp session, and the one exchange over it.

Every HTTP client of ``ground`` (the model calls, the Batch and Files API, Cloud Storage,
Vertex batch prediction, the redirect resolver) holds its session through
:class:`SessionOwner`, created with the client and closed when the client's ``async with``
ends. The API clients exchange through :meth:`SessionOwner._exchange` (one request, its
answer, the transport's failures typed as the API edge's errors) and stream files through
:meth:`SessionOwner._lines`.

Every request says who sent it with one user agent, ``ground/<version> (+aiohttp)``, the
version read from the installed package's metadata.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Self
from urllib.parse import quote

import aiohttp
import orjson

from pipeline.errors import ErrorClass
from pipeline.gemini.api_errors import (
    ProtocolError,
    TransientError,
    Unreachable,
    classify_http_error,
)

__all__ = [
    "SessionOwner",
]

try:
    VERSION = metadata.version("ground")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "0+unknown"
USER_AGENT = f"ground/{VERSION} (+aiohttp)"
DOWNLOAD_READ_BYTES = 1024 * 1024  # bytes read from a download stream at a time
MAX_LINE_BYTES = 64 * 1024 * 1024  # a downloaded line longer than this is refused as hostile
ERROR_BODY_BYTES = 16 * 1024  # of a failed download, what is read to classify the error


@dataclass(frozen=True, slots=True)
class Exchange:
    """An answered request: its status, body and headers (names lower-cased)."""

    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        """The body as JSON (``{}`` when empty); a body that is not JSON is a ProtocolError."""
        return json_body(self.body)


def json_body(raw: bytes) -> Any:
    """``raw`` as JSON (``{}`` when empty); a :class:`ProtocolError` when it is not JSON."""
    try:
        return orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        raise ProtocolError("a 2xx answer that is not JSON") from None


async def listed(
    get: Callable[[str], Awaitable[Exchange]], url: str, items: str
) -> AsyncIterator[dict[str, Any]]:
    """Each entry under ``items`` of a paged list, page after page: ``url`` (which has a query
    already), then ``url&pageToken=...`` for as long as a page names a ``nextPageToken``
    (https://google.aip.dev/158)."""
    token = ""
    while True:
        page = await get(f"{url}&pageToken={quote(token, safe='')}" if token else url)
        document = page.json()
        for item in document.get(items) or ():
            yield item
        token = document.get("nextPageToken") or ""
        if not token:
            return


def resource_path(name: str) -> str:
    """A resource name (``batches/x``, ``projects/p/.../batchPredictionJobs/id``) as a URL
    path, each segment quoted."""
    return "/".join(quote(segment, safe="-_.") for segment in name.split("/"))


class TransportErrors:
    """Within it, aiohttp's failures become the API edge's errors, naming ``where``: no
    connection made is :class:`Unreachable`; a body cut short is a ``truncated``
    :class:`TransientError`, a timeout a ``timeout`` one (within ``timeout_s``, when given),
    any other broken connection a ``connection`` one."""

    __slots__ = ("_timeout_s", "_where")

    def __init__(self, where: str, timeout_s: float | None = None) -> None:
        self._where = where
        self._timeout_s = timeout_s

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _: object
    ) -> None:
        if exc is None:
            return
        where = self._where
        if isinstance(exc, aiohttp.ClientConnectorError):
            raise Unreachable(f"cannot connect to {where}: {exc.os_error}") from None
        if isinstance(exc, TimeoutError):
            within = f" within {self._timeout_s:g} s" if self._timeout_s is not None else " in time"
            raise TransientError(
                f"no complete answer from {where}{within}", error_class=ErrorClass.TIMEOUT
            ) from None
        if isinstance(exc, aiohttp.ClientPayloadError):
            raise TransientError(
                f"the answer from {where} broke off: {exc}", error_class=ErrorClass.TRUNCATED
            ) from None
        if isinstance(exc, aiohttp.ClientError):
            raise TransientError(
                f"connection to {where} failed: {type(exc).__name__}: {exc}",
                error_class=ErrorClass.CONNECTION,
            ) from None


class SessionOwner:
    """A client that owns one aiohttp session; use the client as an async context manager.

    ``timeout``: the session's default; ``limit``: connections at most (0: aiohttp's 100);
    ``headers``: sent with every request, after the user agent; ``cookies``: off unless asked
    (nothing here needs them, and a redirect host must not be able to set any); ``service``:
    how failures name what could not be reached.
    """

    __slots__ = ("_service", "_session")

    def __init__(
        self,
        *,
        timeout: aiohttp.ClientTimeout,
        limit: int = 0,
        headers: dict[str, str] | None = None,
        cookies: bool = False,
        service: str = "the API",
    ) -> None:
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit) if limit else None
        self._service = service
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            headers={"user-agent": USER_AGENT, **(headers or {})},
            cookie_jar=None if cookies else aiohttp.DummyCookieJar(),
            raise_for_status=False,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._session.close()

    async def _exchange(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (),
        redirects: bool = True,
    ) -> Exchange:
        """One request. A status outside 2xx and ``ok`` raises the API edge's error for it
        (:func:`~pipeline.gemini.api_errors.classify_http_error`); a connection that could
        not be made is :class:`Unreachable`, one that broke or timed out a
        :class:`TransientError`."""
        with TransportErrors(self._service):
            async with self._session.request(
                method, url, data=body, headers=headers, allow_redirects=redirects
            ) as resp:
                exchange = Exchange(
                    resp.status,
                    await resp.read(),
                    {k.lower(): v for k, v in resp.headers.items()},
                )
        if not (200 <= exchange.status < 300 or exchange.status in ok):
            raise classify_http_error(exchange.status, exchange.body, exchange.headers)
        return exchange

    async def _lines(
        self, url: str, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[bytes]:
        """A file's lines, streamed one at a time without the newline (blank ones skipped);
        a line longer than :data:`MAX_LINE_BYTES` is a :class:`ProtocolError`."""
        with TransportErrors(self._service):
            async with self._session.get(url, headers=headers) as resp:
                if not 200 <= resp.status < 300:
                    raise classify_http_error(
                        resp.status, await resp.content.read(ERROR_BODY_BYTES)
                    )
                pending = b""
                async for chunk in resp.content.iter_chunked(DOWNLOAD_READ_BYTES):
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        if line.strip():
                            yield line
                    if len(pending) > MAX_LINE_BYTES:
                        raise ProtocolError(f"a line over {MAX_LINE_BYTES} bytes")
                if pending.strip():
                    yield pending
