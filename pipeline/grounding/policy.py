"""Source policies: whether a source's resolved destination breaks the job's ``[sources]``
rules, by its registrable domain. Pure.

**One canonical name.** A destination, a host or an entry is read by :func:`policy_name`
alone: scheme, user, port, path and a leading ``www.`` dropped, then
:func:`pipeline.grounding.hosts.canonical_host` (case, trailing dots, fullwidth and
ideographic dots, IDN written as ``xn--`` Punycode). So ``https://News.SPAM.co.uk.:8443/x``,
``news.spam.co.uk`` and ``NEWS．spam．co．uk`` are one name, and ``bücher.de`` and
``xn--bcher-kva.de`` are one domain.

**One registrable-domain rule.** A name's *registrable domain* is its public suffix and one
label more, read from the Public Suffix List bundled with the ``publicsuffixlist`` package
(never fetched at run time), its private entries included (``github.io``, ``blogspot.com``):
``news.bbc.co.uk`` is ``bbc.co.uk``, ``alice.github.io`` is ``alice.github.io`` (a site of its
own, as browsers treat it).

**What an entry means.**

* An entry with a registrable domain stands for it: ``deny_domains = ["www.BBC.co.uk."]``
  denies every host whose registrable domain is ``bbc.co.uk``.
* An entry that *is* a public suffix (``co.uk``, or a private one such as ``github.io`` or
  ``blogspot.com``) stands for every host under it: ``deny_domains = ["blogspot.com"]``
  denies ``evil.blogspot.com``, and ``allow_domains = ["github.io"]`` allows
  ``alice.github.io``. To name one site under such a suffix, write the site
  (``alice.github.io``).
* An IP address stands for itself.

* ``deny_domains``: a destination an entry stands for breaks the policy;
* ``allow_domains`` (when not empty): a destination no entry stands for breaks it;
* a destination with no host (not http(s)) breaks an allow list and no deny list;
* a source with no resolved destination is never judged (its redirect link is not where it
  leads).

One ``action`` per job (flag, drop or reask) applies to every broken source, whichever list
it broke: every action asks :meth:`SourcePolicy.breaks`, so they never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import cache
from typing import Literal

from publicsuffixlist import PublicSuffixList

from pipeline.grounding.hosts import InvalidHost, canonical_host

__all__ = [
    "POLICY_DROPPED",
    "POLICY_FLAGGED",
    "POLICY_OK",
    "POLICY_REASKED",
    "SourcePolicy",
    "avoid_domains",
    "avoiding",
    "covered_share",
    "kept_support",
    "policy_name",
    "registrable_domain",
]

PolicyAction = Literal["flag", "drop", "reask"]
# What a stored source's ``policy`` column holds once judged: it passed ("ok"), or the action
# taken on it. "reasked" marks a source whose question was asked again for it.
POLICY_OK = "ok"
POLICY_FLAGGED = "flagged"
POLICY_DROPPED = "dropped"
POLICY_REASKED = "reasked"
POLICY_MARKS = (POLICY_OK, POLICY_FLAGGED, POLICY_DROPPED, POLICY_REASKED)


@cache
def _suffix_list() -> PublicSuffixList:
    """The bundled list, read once (``only_icann=False``: private suffixes such as
    ``github.io`` count, so ``alice.github.io`` and ``bob.github.io`` are two sites)."""
    return PublicSuffixList()


def policy_name(text: str | None) -> str | None:
    """The one spelling of the host that ``text`` names (a URL, ``host:port``, a bare host,
    an entry as written): see the module's note. None when it names no host, or a URL's
    scheme is not http(s)."""
    if not text:
        return None
    name = text.strip()
    scheme, found, rest = name.partition("://")
    if found:
        if scheme.lower() not in ("http", "https"):
            return None
        name = rest
    name = name.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    name = name.rpartition("@")[2]  # user:password@ is no part of the host
    if name.startswith("["):  # [IPv6]:port
        name = name[: name.find("]") + 1] if "]" in name else name
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    try:
        host = canonical_host(name)
    except InvalidHost:
        return None
    return host.removeprefix("www.") if host.count(".") > 1 else host


def _is_address(name: str) -> bool:
    return name.startswith("[") or name.replace(".", "").isdigit()


def registrable_domain(text: str | None) -> str | None:
    """The registrable domain of what ``text`` names (any spelling :func:`policy_name` reads):
    ``https://News.BBC.co.uk.:443/`` -> ``bbc.co.uk``; None for an IP address, a public
    suffix alone, or nothing."""
    name = policy_name(text)
    if not name or _is_address(name):
        return None
    return _suffix_list().privatesuffix(name)


@dataclass(frozen=True, slots=True)
class SourcePolicy:
    """The job's ``[sources]`` rules: each entry as the name it stands for (a registrable
    domain, a public suffix, or an IP address)."""

    deny: frozenset[str] = frozenset()
    allow: frozenset[str] = frozenset()
    action: PolicyAction = "flag"

    @classmethod
    def of(
        cls, deny: Iterable[str], allow: Iterable[str], action: PolicyAction = "flag"
    ) -> SourcePolicy:
        """Rules from the job file's entries, each read by :func:`policy_name`, then as its
        registrable domain (an entry with none, a public suffix, is kept as itself)."""
        return cls(_entries(deny), _entries(allow), action)

    @property
    def active(self) -> bool:
        return bool(self.deny or self.allow)

    def breaks(self, destination: str | None) -> bool:
        """Whether a source resolved to ``destination`` breaks the rules (False when it has
        no destination: nothing is known of where it leads)."""
        if not destination or not self.active:
            return False
        name = policy_name(destination)
        if self.allow and not (name and _stands_for(self.allow, name)):
            return True
        return bool(name) and _stands_for(self.deny, name or "")

    def mark(self, destination: str | None, *, reasked_before: bool = False) -> str | None:
        """The ``policy`` mark of a source resolved to ``destination``: None while it has no
        destination, ``ok``, or the action's mark. A reask answered already is flagged: a
        question is asked again at most once."""
        if not destination:
            return None
        if not self.breaks(destination):
            return POLICY_OK
        if self.action == "drop":
            return POLICY_DROPPED
        if self.action == "reask" and not reasked_before:
            return POLICY_REASKED
        return POLICY_FLAGGED


def _stands_for(entries: frozenset[str], name: str) -> bool:
    """Whether one of ``entries`` stands for the host ``name`` (canonical): its registrable
    domain is an entry, or it is an entry or under one (public-suffix and address entries)."""
    if not entries:
        return False
    site = registrable_domain(name)
    if site is not None and site in entries:
        return True
    if name in entries:
        return True
    if _is_address(name):
        return False
    labels = name.split(".")
    return any(".".join(labels[i:]) in entries for i in range(1, len(labels)))


def _entries(domains: Iterable[str]) -> frozenset[str]:
    found = set()
    for entry in domains:
        name = policy_name(entry)
        if name:
            found.add(registrable_domain(name) or name)
    return frozenset(found)


def avoid_domains(policy: SourcePolicy, found: Iterable[str]) -> list[str]:
    """The domains a re-ask names: the job's deny list and the registrable domains the answer
    cited against the rules (an allow list's outsiders), sorted."""
    return sorted(set(policy.deny) | {d for d in found if d})


def avoiding(question: str, domains: Sequence[str]) -> str:
    """The question as a re-ask puts it: with a last sentence naming the ``domains`` to avoid
    (plain ASCII names, Punycode for IDNs; never text from a page). Unchanged without any."""
    if not domains:
        return question
    return f"{question}\n\nDo not use or cite sources from these domains: {', '.join(domains)}."


def kept_support(
    indices: Sequence[int], scores: Sequence[float] | None, dropped: AbstractSet[int]
) -> tuple[list[int], list[float] | None] | None:
    """A support's chunk indices (and their parallel confidence scores) without the dropped
    sources; None when it cited only dropped sources (the support is left out). A support that
    cited nothing stays as it was."""
    if not dropped or not indices:
        return list(indices), list(scores) if scores is not None else None
    keep = [i for i, index in enumerate(indices) if index not in dropped]
    if not keep:
        return None
    kept_scores = None
    if scores is not None:  # parallel to the indices; kept whole when it is not
        kept_scores = [scores[i] for i in keep] if len(scores) == len(indices) else list(scores)
    return [indices[i] for i in keep], kept_scores


def covered_share(length: int, spans: Iterable[tuple[int, int]]) -> float:
    """The share of ``[0, length)`` inside at least one ``[start, end)`` span (the answer's
    coverage, as :func:`pipeline.grounding.mapping.coverage` counts it)."""
    if length <= 0:
        return 0.0
    covered = pos = 0
    for start, end in sorted(spans):
        start, end = max(start, pos), min(end, length)
        if end > start:
            covered += end - start
            pos = end
    return covered / length
