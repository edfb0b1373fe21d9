"""The desk's defences: response headers (a strict Content-Security-Policy) and the CSRF
token every form carries.

Everything the desk shows from the job (questions, answers, titles, Search suggestions) is
untrusted. The templates escape it (Jinja2 autoescape); the policy below is the second wall:
scripts only from the desk's own ``/static/`` (no inline script at all, so an injected
``<script>`` or ``onerror=`` cannot run), no plugin, no framing by another site, forms only
back to the desk. Inline styles stay allowed: Google's Search suggestions, shown verbatim in
a ``srcdoc`` iframe (which inherits this policy), carry their own ``<style>``.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web

from pipeline.errors import GroundError

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


class CsrfRefused(GroundError, ValueError):
    """A POST without the desk's token: refused (403)."""


def new_token() -> str:
    """A fresh random token (one per desk process)."""
    return secrets.token_urlsafe(32)


def check_csrf(expected: str, given: object) -> None:
    """Raise :class:`CsrfRefused` unless ``given`` is the desk's token."""
    if not isinstance(given, str) or not hmac.compare_digest(expected, given):
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
