"""Grounded answers: citation mapping (``mapping``) and its renderers (``render``). Pure, no IO.

:func:`ground_answer` maps a candidate's ``groundingMetadata`` onto its visible text; the
renderers turn the resulting :class:`GroundedAnswer` into markdown, HTML or a JSON-ready dict.
"""

from pipeline.grounding import domains, hosts
from pipeline.grounding.domains import from_excluded, normalised
from pipeline.grounding.hosts import is_local_url, is_loopback_host, without_userinfo
from pipeline.grounding.mapping import Citation, GroundedAnswer, Source, coverage, ground_answer
from pipeline.grounding.policy import (
    POLICY_DROPPED,
    POLICY_FLAGGED,
    POLICY_OK,
    POLICY_REASKED,
    SourcePolicy,
    avoid_domains,
    avoiding,
    covered_share,
    kept_support,
    registrable_domain,
)
from pipeline.grounding.render import (
    DOCUMENT_CSS,
    markdown_text,
    marker_groups,
    render_html,
    render_html_document,
    render_markdown,
    safe_http_url,
    to_json_dict,
)
from pipeline.grounding.version_diff import (
    DESTINATIONS,
    SourceFacts,
    compare,
    destination_set,
    with_aspect,
)

__all__ = [
    "DESTINATIONS",
    "DOCUMENT_CSS",
    "POLICY_DROPPED",
    "POLICY_FLAGGED",
    "POLICY_OK",
    "POLICY_REASKED",
    "Citation",
    "GroundedAnswer",
    "Source",
    "SourceFacts",
    "SourcePolicy",
    "avoid_domains",
    "avoiding",
    "compare",
    "coverage",
    "covered_share",
    "destination_set",
    "domains",
    "from_excluded",
    "ground_answer",
    "hosts",
    "is_local_url",
    "is_loopback_host",
    "kept_support",
    "markdown_text",
    "marker_groups",
    "normalised",
    "registrable_domain",
    "render_html",
    "render_html_document",
    "render_markdown",
    "safe_http_url",
    "to_json_dict",
    "with_aspect",
    "without_userinfo",
]
