"""Pure rules for source URIs: which are redirects to resolve, and which destinations to keep.

Grounding chunk URIs on Google's redirect host expire, so the destination they lead to is
recorded at once (``docs/wire-format.md`` "Grounding redirect URIs"). These functions decide,
without any IO:

* whether a URI is a redirect we may request (its host is allow-listed), is its own
  destination (a publisher URL from url_context, a Maps link, a ``gs://`` document), or is
  unusable;
* whether a ``Location`` is a destination worth storing: http/https only, no userinfo, a length
  cap, and not an address inside a private network (a redirect that points at
  ``169.254.169.254`` is stored as given, marked ``rejected``, and never contacted).

An allow-list entry is ``host`` (that host on its scheme's default port) or ``host:port``.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from urllib.parse import SplitResult, urljoin, urlsplit

from pipeline.job.states import SourceState, Verdict

MAX_URL_CHARS = 4096  # a destination longer than this is rejected, not truncated
DEFAULT_PORTS = {"http": 80, "https": 443}
DIRECT_SCHEMES = frozenset({"http", "https", "gs"})
# What a scheme and host[:port] say is decided once: a run meets the same few redirect hosts,
# and a destination's site, again and again (hostname and port re-read the netloc each time).
NETLOC_DECISIONS = 4_096  # (scheme, netloc) decisions remembered, per allow-list and in all


class AllowList:
    """Redirect hosts that may be requested, as ``host`` or ``host:port`` entries."""

    __slots__ = ("_allows_netloc", "_entries")

    def __init__(self, entries: Iterable[str]) -> None:
        self._entries = frozenset(e.lower() for e in entries)
        self._allows_netloc = functools.lru_cache(maxsize=NETLOC_DECISIONS)(self._decide)

    def allows(self, url: str) -> bool:
        parts = _split(url)
        return parts is not None and self._allows_netloc(parts.scheme, parts.netloc)

    def _decide(self, scheme: str, netloc: str) -> bool:
        parts = _split(f"{scheme}://{netloc}")
        if parts is None or scheme not in DEFAULT_PORTS or not parts.hostname:
            return False
        try:
            port = parts.port or DEFAULT_PORTS[scheme]
        except ValueError:
            return False
        host = parts.hostname.lower()
        if f"{host}:{port}" in self._entries:
            return True
        return host in self._entries and port == DEFAULT_PORTS[scheme]


def initial_verdict(uri: str | None, allow: AllowList) -> Verdict:
    """Classify a freshly stored source's URI."""
    if not uri:
        return Verdict(SourceState.NO_URI)
    if allow.allows(uri):
        return Verdict(SourceState.PENDING)
    parts = _split(uri)
    if parts is None or parts.scheme not in DIRECT_SCHEMES:
        return Verdict(SourceState.REJECTED, uri[:MAX_URL_CHARS], "not an http(s) or gs:// URI")
    if parts.scheme == "gs":
        return Verdict(SourceState.DIRECT, uri)
    reason = destination_problem(parts, uri)
    if reason is not None:
        return Verdict(SourceState.REJECTED, uri[:MAX_URL_CHARS], reason)
    return Verdict(SourceState.DIRECT, uri)


def resolve_location(location: str, base: str) -> str:
    """A ``Location`` header made absolute against the URL that sent it (an absolute one,
    the usual case, is taken as it is: joining would only parse it twice more)."""
    location = location.strip()
    if location.startswith(("https://", "http://")):
        return location
    return urljoin(base, location)


def check_destination(url: str) -> str | None:
    """Why ``url`` is not an acceptable destination, or None when it is."""
    parts = _split(url)
    if parts is None:
        return "not a valid URL"
    return destination_problem(parts, url)


def destination_problem(parts: SplitResult, url: str) -> str | None:
    if len(url) > MAX_URL_CHARS:
        return f"longer than {MAX_URL_CHARS} characters"
    return _netloc_problem(parts.scheme, parts.netloc)


@functools.lru_cache(maxsize=NETLOC_DECISIONS)
def _netloc_problem(scheme: str, netloc: str) -> str | None:
    if scheme not in DEFAULT_PORTS:
        return f"scheme {scheme or '(none)'!r} is not http or https"
    parts = _split(f"{scheme}://{netloc}")
    if parts is None or not parts.hostname:
        return "no host"
    if parts.username is not None or parts.password is not None:
        return "carries user information"
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return "malformed port"
    if _is_internal_address(parts.hostname):
        return "points at a private, loopback or link-local address"
    return None


def _is_internal_address(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return not address.is_global


def _split(url: str) -> SplitResult | None:
    try:
        return urlsplit(url)
    except ValueError:
        return None
