"""Whether a cited source comes from a domain the job excluded (``exclude_domains``), pure.

Vertex's ``googleSearch.excludeDomains`` asks Google to leave domains out of the search
(googleapis ``google/cloud/aiplatform/v1/tool.proto``); nothing in the answer says whether it
did. So ``ground status`` checks what was cited: a source is from an excluded domain when any
host it names (the web chunk's ``domain``, Vertex only; its ``title``, the bare domain on Search
grounding; its resolved destination's host) is an excluded domain or under one
(``en.wikipedia.org`` under ``wikipedia.org``). An entry's scheme, path and ``www.`` are
ignored, so ``https://www.example.com/`` excludes ``example.com`` and its subdomains.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from pipeline.grounding.hosts import InvalidHost, canonical_host

__all__ = [
    "from_excluded",
    "normalised",
]


def normalised(domain: str) -> str:
    """``https://www.Example.com/x`` -> ``example.com`` (what an entry means)."""
    text = domain.strip().lower()
    if "://" in text:
        text = urlsplit(text).hostname or ""
    text = _canonical(text.split("/", 1)[0])
    return text.removeprefix("www.")


def host_of(url: str | None) -> str | None:
    """The host of an http(s) URL in its canonical spelling; None for anything else."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return _canonical(parts.hostname)


def under(host: str, domains: Sequence[str]) -> bool:
    """Whether ``host`` is one of ``domains`` (normalised) or a subdomain of one."""
    host = _canonical(host.strip().lower())
    return any(d and (host == d or host.endswith("." + d)) for d in domains)


def _canonical(host: str) -> str:
    """``host`` as :func:`pipeline.grounding.hosts.canonical_host` spells it (fullwidth dots,
    case, a trailing dot), or as written when no URL parser would take it."""
    try:
        return canonical_host(host)
    except InvalidHost:
        return host.rstrip(".")


def source_hosts(domain: str | None, title: str | None, destination: str | None) -> list[str]:
    """The hosts a source names: its domain, a title that is a bare domain, its destination's."""
    hosts = [h for h in (domain, host_of(destination)) if h]
    if title and "." in title and " " not in title.strip():
        hosts.append(title)
    return hosts


def from_excluded(
    domain: str | None, title: str | None, destination: str | None, excluded: Iterable[str]
) -> bool:
    """Whether the source is from one of the ``excluded`` domains."""
    wanted = [normalised(d) for d in excluded]
    return any(under(h, wanted) for h in source_hosts(domain, title, destination))
