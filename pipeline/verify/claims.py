"""Claims: what a stored grounded answer asserts, and what each assertion cites.

Each grounding support's segment text is a *claim*. Its cited sources are the chunks its
``chunk_indices`` name, each checked one of two ways:

* a source with text of its own (own retrieval's chunks, Vertex AI Search
  ``retrievedContext.text``, RAG chunks) is checked against that text, in a call with no tools;
* any other source is checked at its **resolved destination** (``url_context`` reads it).

A source that is neither (its redirect not resolved, expired, refused, no URI) is counted
``unresolved`` and sends nothing. A destination that is itself a redirect link (a
``vertexaisearch.cloud.google.com`` one, or any ``/grounding-api-redirect/`` path) is never
sent either: ``url_context`` cannot follow those, so it counts as unresolved too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from pipeline.rows import StoredSource, StoredSupport

__all__ = [
    "AnswerClaims",
    "Claim",
    "claims_of",
]

# The host of Google's grounding redirects: never sent to a model for reading.
REDIRECT_HOST = "vertexaisearch.cloud.google.com"
REDIRECT_PATH = "/grounding-api-redirect/"
# sources.resolve_status values whose destination is the page itself.
USABLE_STATES = frozenset({"resolved", "direct"})
TEXT_KINDS = frozenset({"retrievedContext", "own", "rag"})


@dataclass(frozen=True, slots=True)
class TextSource:
    """A cited source checked against its own text."""

    chunk_index: int
    text: str


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim: its index in the answer (the support's ordinal), its text, the distinct
    destinations it cites and the sources with text of their own it cites."""

    index: int
    text: str
    urls: tuple[str, ...]
    texts: tuple[TextSource, ...]
    unresolved: int  # cited sources with neither a usable destination nor text


@dataclass(frozen=True, slots=True)
class AnswerClaims:
    """A stored answer's claims (only those citing something)."""

    answer_id: int
    question_id: int
    qclass: str
    claims: tuple[Claim, ...]

    @property
    def unresolved(self) -> int:
        return sum(c.unresolved for c in self.claims)

    @property
    def destinations(self) -> frozenset[str]:
        """Every URL this answer may send for reading."""
        return frozenset(u for c in self.claims for u in c.urls)

    def destinations_in_order(self) -> tuple[str, ...]:
        """The same URLs, each once, in the order the claims first cite them."""
        return tuple(dict.fromkeys(u for c in self.claims for u in c.urls))


def is_redirect_link(url: str, redirect_hosts: Iterable[str] = ()) -> bool:
    """Whether ``url`` is a grounding redirect (never given to a model to read)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    hosts = {REDIRECT_HOST, *(h.lower() for h in redirect_hosts)}
    return host in hosts or REDIRECT_PATH in parts.path or REDIRECT_HOST in url.lower()


def readable_destination(source: StoredSource, redirect_hosts: Iterable[str] = ()) -> str | None:
    """The URL a model may read for ``source``: its resolved http(s) destination, not a
    redirect link; None otherwise."""
    url = source.destination
    if not url or source.resolve_status not in USABLE_STATES:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if is_redirect_link(url, redirect_hosts):
        return None
    return url


def own_text(source: StoredSource) -> str | None:
    """The text a source carries of its own (own retrieval, retrievedContext, RAG), if any."""
    if source.text and (source.kind in TEXT_KINDS or source.doc_id is not None):
        return source.text
    return None


def claims_of(
    answer_id: int,
    question_id: int,
    qclass: str,
    supports: Sequence[StoredSupport],
    sources: Sequence[StoredSource],
    redirect_hosts: Iterable[str] = (),
) -> AnswerClaims:
    """The claims of one answer, in support order; supports citing nothing are left out."""
    hosts = tuple(redirect_hosts)
    by_index = {s.chunk_index: s for s in sources}
    claims: list[Claim] = []
    for support in sorted(supports, key=lambda s: s.ordinal):
        if not support.chunk_indices:
            continue
        urls: dict[str, None] = {}
        texts: list[TextSource] = []
        unresolved = 0
        for index in dict.fromkeys(support.chunk_indices):
            source = by_index.get(index)
            text = own_text(source) if source is not None else None
            url = readable_destination(source, hosts) if source is not None else None
            if text is not None:
                texts.append(TextSource(index, text))
            elif url is not None:
                urls[url] = None
            else:
                unresolved += 1
        claims.append(Claim(support.ordinal, support.text, tuple(urls), tuple(texts), unresolved))
    return AnswerClaims(answer_id, question_id, qclass, tuple(claims))
