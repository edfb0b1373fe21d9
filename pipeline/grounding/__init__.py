"""Grounded answers: citation mapping (``mapping``) and its renderers (``render``). Pure, no IO.

:func:`ground_answer` maps a candidate's ``groundingMetadata`` onto its visible text; the
renderers turn the resulting :class:`GroundedAnswer` into markdown, HTML or a JSON-ready dict.
"""

from pipeline.grounding import domains, hosts
from pipeline.grounding.domains import from_excluded, normalised
from pipeline.grounding.hosts import without_userinfo
from pipeline.grounding.mapping import Citation, GroundedAnswer, Source, coverage, ground_answer
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
    "Citation",
    "GroundedAnswer",
    "Source",
    "SourceFacts",
    "compare",
    "coverage",
    "destination_set",
    "domains",
    "from_excluded",
    "ground_answer",
    "hosts",
    "markdown_text",
    "marker_groups",
    "normalised",
    "render_html",
    "render_html_document",
    "render_markdown",
    "safe_http_url",
    "to_json_dict",
    "with_aspect",
    "without_userinfo",
]
