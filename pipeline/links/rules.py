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

Every decision is about the host in its one canonical spelling (:mod:`pipeline.grounding.hosts`):
``http://2130706433/``, ``http://0x7f.1/``, ``http://127。0。0。1/`` and ``http://localhost./``
are rejected as ``http://127.0.0.1/`` and ``http://localhost/`` are, and an allow-listed
host is recognised however it is written. A link is requested as :meth:`AllowList.request_url`
writes it: the canonical host, and no ``user:password@`` (credentials in a link are never sent,
and never stored: a rejected URI is stored without them).

An allow-list entry is ``host`` (that host on its scheme's default port) or ``host:port``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from urllib.parse import SplitResult, urljoin, urlsplit

from pipeline.grounding import hosts
from pipeline.job.states import SourceState, Verdict

__all__ = [
    "AllowList",
    "initial_verdict",
]

MAX_URL_CHARS = 4096  # a destination longer than this is rejected, not truncated
DEFAULT_PORTS = {"http": 80, "https": 443}
DIRECT_SCHEMES = frozenset({"http", "https", "gs"})
# What a scheme and host[:port] say is decided once: a run meets the same few redirect hosts,
# and a destination's site, again and again (hostname and port re-read the netloc each time).
NETLOC_DECISIONS = 4_096  # (scheme, netloc) decisions remembered, per allow-list and in all


class AllowList:
    """Redirect hosts that may be requested, as ``host`` or ``host:port`` entries."""

    __slots__ = ("_entries", "_netloc_to_request")

    def __init__(self, entries: Iterable[str]) -> None:
        self._entries = frozenset(_entry(e) for e in entries)
        self._netloc_to_request = functools.lru_cache(maxsize=NETLOC_DECISIONS)(self._decide)

    def allows(self, url: str) -> bool:
        return self.request_url(url) is not None

    def request_url(self, url: str) -> str | None:
        """``url`` as it is requested (its host canonical, any userinfo left out), or None
        when its host is not allow-listed."""
        parts = _split(url)
        if parts is None:
            return None
        netloc = self._netloc_to_request(parts.scheme, parts.netloc)
        if netloc is None:
            return None
        return url if netloc == parts.netloc else parts._replace(netloc=netloc).geturl()

    def _decide(self, scheme: str, netloc: str) -> str | None:
        parts = _split(f"{scheme}://{netloc}")
        if parts is None or scheme not in DEFAULT_PORTS or not parts.hostname:
            return None
        try:
            port = parts.port
            host = hosts.canonical_host(parts.hostname)
        except ValueError:  # a malformed port, or hosts.InvalidHost
            return None
        default = port is None or port == DEFAULT_PORTS[scheme]
        if (host, port or DEFAULT_PORTS[scheme]) in self._entries or (
            default and (host, None) in self._entries
        ):
            return host if port is None else f"{host}:{port}"
        return None


def _entry(entry: str) -> tuple[str, int | None]:
    """An allow-list entry as (canonical host, port or None)."""
    text = entry.strip().lower()
    parts = _split(f"//{text}")
    try:
        if parts is not None and parts.hostname:
            return hosts.canonical_host(parts.hostname), parts.port
    except ValueError:
        pass
    return text, None  # matches nothing a URL can spell


def initial_verdict(uri: str | None, allow: AllowList) -> Verdict:
    """Classify a freshly stored source's URI (a rejected one is given without userinfo)."""
    if not uri:
        return Verdict(SourceState.NO_URI)
    if allow.allows(uri):
        return Verdict(SourceState.PENDING)
    parts = _split(uri)
    if parts is None or parts.scheme not in DIRECT_SCHEMES:
        return rejected(uri, "not an http(s) or gs:// URI")
    if parts.scheme == "gs":
        return Verdict(SourceState.DIRECT, uri)
    reason = destination_problem(parts, uri)
    if reason is not None:
        return rejected(uri, reason)
    return Verdict(SourceState.DIRECT, uri)


def rejected(url: str, reason: str) -> Verdict:
    """A ``rejected`` verdict: ``url`` kept as given (to the length cap), less its userinfo."""
    return Verdict(SourceState.REJECTED, hosts.without_userinfo(url)[:MAX_URL_CHARS], reason)


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
    try:
        host = hosts.canonical_host(parts.hostname)
    except hosts.InvalidHost:
        return "not a valid host"
    if hosts.internal_reason(host) is not None:
        return "points at a private, loopback or link-local address"
    return None


def _split(url: str) -> SplitResult | None:
    try:
        return urlsplit(url)
    except ValueError:
        return None
