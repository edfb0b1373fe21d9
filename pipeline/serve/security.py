"""The desk's defences: the session token every request needs, response headers (a strict
Content-Security-Policy) and the CSRF token every form carries.

* **Sessions.** ``ground serve`` prints a link carrying the desk's access token. Opening it
  sets a cookie (HttpOnly, SameSite=Strict) and sends the browser on to the same page without
  the token in its address (out of the history and of any Referer); a request with neither
  the cookie nor the token gets 401. The token is never logged (the desk keeps no access log).

Everything the desk shows from the job (questions, answers, titles, Search suggestions) is
untrusted. The templates escape it (Jinja2 autoescape); the policy below is the second wall:
scripts only from the desk's own ``/static/`` (no inline script at all, so an injected
``<script>`` or ``onerror=`` cannot run), no plugin, no framing by another site, forms only
back to the desk. Inline styles stay allowed: Google's Search suggestions, shown verbatim in
a ``srcdoc`` iframe (which inherits this policy), carry their own ``<style>``.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware

from pipeline.errors import GroundError

__all__ = [
    "MIN_TOKEN_LENGTH",
    "SERVER_LOG",
    "new_token",
]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline';"
    " img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none';"
    " frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SESSION_COOKIE = "ground_desk_session"
TOKEN_PARAMETER = "token"  # noqa: S105 (the query parameter's name)
MIN_TOKEN_LENGTH = 32  # characters of a token the user chose (GROUND_DESK_TOKEN)
UNAUTHORIZED = (
    "<!doctype html><title>401</title><p>This desk needs the link <code>ground serve</code>"
    " printed when it started: it carries the session token.</p>"
)


LOGGED_CHARS = 200  # of an error's message, in the desk's one log line


class OneLine(logging.Filter):
    """The desk server's log records as one line each, without a traceback and without what
    the client sent: aiohttp's refusal of an oversized request line or header (its message
    quotes the start of the line, where the session token may be) logs the error's class and
    status only; any other error its class and the first line of its message."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return True
        if isinstance(exc, HttpProcessingError):
            record.msg, record.args = (
                "refused a request: %s (HTTP %s)",
                (
                    type(exc).__name__,
                    exc.code,
                ),
            )
        else:
            lines = str(exc).strip().splitlines()
            first = lines[0][:LOGGED_CHARS] if lines else ""
            record.msg, record.args = "a request failed: %s: %s", (type(exc).__name__, first)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


# The logger the desk's server writes to (its access log is off: a request line may carry
# the token): every record one line (:class:`OneLine`).
SERVER_LOG = logging.getLogger("pipeline.serve.server")
SERVER_LOG.addFilter(OneLine())


class CsrfRefused(GroundError, ValueError):
    """A POST without the desk's token: refused (403)."""


def new_token() -> str:
    """A fresh random token (one per desk process)."""
    return secrets.token_urlsafe(32)


def same_token(expected: str, given: object) -> bool:
    """``given`` is ``expected``, compared in constant time."""
    return isinstance(given, str) and hmac.compare_digest(expected.encode(), given.encode())


def session_gate(token: str) -> Middleware:
    """The middleware that lets through only requests of a session opened with ``token``."""

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if same_token(token, request.cookies.get(SESSION_COOKIE)):
            return await handler(request)
        if not same_token(token, request.query.get(TOKEN_PARAMETER)):
            raise web.HTTPUnauthorized(text=UNAUTHORIZED, content_type="text/html")
        opened = web.HTTPSeeOther(request.rel_url.without_query_params(TOKEN_PARAMETER))
        opened.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="Strict", path="/")
        raise opened

    return gate


def check_csrf(expected: str, given: object) -> None:
    """Raise :class:`CsrfRefused` unless ``given`` is the desk's token."""
    if not same_token(expected, given):
        raise CsrfRefused("the form's CSRF token is missing or wrong")


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every response, errors included, with :data:`HEADERS`."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(HEADERS)
        raise
    response.headers.update(HEADERS)
    return response
