"""Source policies: whether a source's resolved destination breaks the job's ``[sources]``
rules, by its registrable domain. Pure.

A rule names domains (``deny_domains``, ``allow_domains``); a destination is judged by its
*registrable domain*, the public suffix and one label more, read from the Public Suffix List
bundled with the ``publicsuffixlist`` package (never fetched at run time): ``news.bbc.co.uk``
is ``bbc.co.uk``, ``a.b.example.com`` is ``example.com``. An entry is normalised the same way,
so ``deny_domains = ["www.BBC.co.uk."]`` denies every host under ``bbc.co.uk``. Hosts go
through :func:`pipeline.grounding.hosts.canonical_host` first (case, trailing dots, fullwidth
dots, IDN written as ``xn--`` Punycode), so ``bücher.de`` and ``xn--bcher-kva.de`` are one
domain.

* ``deny_domains``: a destination whose registrable domain is listed breaks the policy;
* ``allow_domains`` (when not empty): a destination whose registrable domain is not listed
  breaks it;
* a destination with no registrable domain (an IP address, a bare public suffix, not http(s))
  breaks an allow list and no deny list;
* a source with no resolved destination is never judged (its redirect link is not where it
  leads).

One ``action`` per job applies to every broken source, whichever list it broke.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import cache
from typing import Literal

from publicsuffixlist import PublicSuffixList

from pipeline.grounding.domains import host_of, normalised

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


def registrable_domain(host: str) -> str | None:
    """The registrable domain of ``host`` (any spelling :func:`normalised` reads, a URL
    included): ``News.BBC.co.uk.`` -> ``bbc.co.uk``; None for an IP address, a public suffix
    alone, or nothing."""
    name = normalised(host)
    if not name or name.startswith("[") or name.replace(".", "").isdigit():
        return None
    return _suffix_list().privatesuffix(name)


@dataclass(frozen=True, slots=True)
class SourcePolicy:
    """The job's ``[sources]`` rules, its domains as registrable domains."""

    deny: frozenset[str] = frozenset()
    allow: frozenset[str] = frozenset()
    action: PolicyAction = "flag"

    @classmethod
    def of(
        cls, deny: Iterable[str], allow: Iterable[str], action: PolicyAction = "flag"
    ) -> SourcePolicy:
        """Rules from the job file's entries, each read as its registrable domain (an entry
        with none, such as ``co.uk``, is kept as written, so it still matches itself)."""
        return cls(_entries(deny), _entries(allow), action)

    @property
    def active(self) -> bool:
        return bool(self.deny or self.allow)

    def breaks(self, destination: str | None) -> bool:
        """Whether a source resolved to ``destination`` breaks the rules (False when it has
        no destination: nothing is known of where it leads)."""
        if not destination or not self.active:
            return False
        host = host_of(destination)
        domain = registrable_domain(host) if host is not None else None
        if self.allow and (domain is None or domain not in self.allow):
            return True
        return domain is not None and domain in self.deny

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


def _entries(domains: Iterable[str]) -> frozenset[str]:
    found = set()
    for entry in domains:
        name = normalised(entry)
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
