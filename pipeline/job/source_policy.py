"""``[sources]`` read: its entries checked, its rules as a :class:`SourcePolicy`, and its deny
list sent to Google as ``excludeDomains`` where the backend takes it (Vertex).

Vertex's ``googleSearch`` / ``enterpriseWebSearch`` take ``excludeDomains`` (at most 2,000,
``../reference/gemini-wire-format.md``); the Developer API refuses the field with a 400. So on
Vertex the deny list joins ``[grounding] exclude_domains`` (Google is asked to leave them out
of the search), and on both backends the cited destinations are judged after resolution
(nothing in an answer says whether Google honoured the exclusion).
"""

from __future__ import annotations

import msgspec

from pipeline.grounding.policy import SourcePolicy, policy_name
from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import GroundingSection, RawJob, SourcesSection

__all__ = [
    "policy_of",
]

MAX_EXCLUDE_DOMAINS = 2_000  # googleSearch.excludeDomains entries Vertex takes
SEARCH_TOOLS = ("google_search", "enterprise_web_search")  # those with excludeDomains


def check_sources(sources: SourcesSection) -> None:
    """Every entry names a domain."""
    for key, entries in (
        ("deny_domains", sources.deny_domains),
        ("allow_domains", sources.allow_domains),
    ):
        for entry in entries:
            if not policy_name(entry):
                raise KeyRefused(f"sources.{key}", f"{entry!r} names no domain")


def policy_of(sources: SourcesSection) -> SourcePolicy:
    """The job's rules, its entries read as registrable domains."""
    return SourcePolicy.of(sources.deny_domains, sources.allow_domains, sources.action)


def with_denied_excluded(job: RawJob) -> GroundingSection:
    """``[grounding]`` with ``[sources] deny_domains`` added to ``exclude_domains`` when the
    job searches on Vertex (unchanged otherwise); refused past Vertex's 2,000 entries."""
    g = job.grounding
    deny = job.sources.deny_domains
    if not deny or job.model.backend != "vertex" or not set(g.tools) & set(SEARCH_TOOLS):
        return g
    named = (name for d in deny if (name := policy_name(d)))
    merged = tuple(dict.fromkeys((*g.exclude_domains, *named)))
    if len(merged) > MAX_EXCLUDE_DOMAINS:
        raise KeyRefused(
            "sources.deny_domains",
            f"{len(merged)} domains with grounding.exclude_domains; Vertex takes at most"
            f" {MAX_EXCLUDE_DOMAINS} excludeDomains",
        )
    return msgspec.structs.replace(g, exclude_domains=merged)
