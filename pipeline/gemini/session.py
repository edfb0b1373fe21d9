"""The one owner of an aiohttp session: every HTTP client of ``ground`` (the model calls, the
Batch and Files API, the redirect resolver) holds its session through :class:`SessionOwner`,
created with the client and closed when the client's ``async with`` ends.

Every request says who sent it with one user agent, ``ground/<version> (+aiohttp)``, the
version read from the installed package's metadata.
"""

from __future__ import annotations

from importlib import metadata
from typing import Self

import aiohttp

try:
    VERSION = metadata.version("ground")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "0+unknown"
USER_AGENT = f"ground/{VERSION} (+aiohttp)"


class SessionOwner:
    """A client that owns one aiohttp session; use the client as an async context manager.

    ``timeout``: the session's default; ``limit``: connections at most (0: aiohttp's 100);
    ``headers``: sent with every request, after the user agent; ``cookies``: off unless asked
    (nothing here needs them, and a redirect host must not be able to set any).
    """

    __slots__ = ("_session",)

    def __init__(
        self,
        *,
        timeout: aiohttp.ClientTimeout,
        limit: int = 0,
        headers: dict[str, str] | None = None,
        cookies: bool = False,
    ) -> None:
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit) if limit else None
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
