"""Renderers for a :class:`~pipeline.grounding.mapping.GroundedAnswer`: pure functions, no IO.

Markdown, HTML (a fragment and a standalone document) and a JSON-ready dict. Markers go after the
last non-space character of each citation and never inside a grapheme cluster
(:func:`marker_groups`); only http(s) URLs become links (:func:`safe_http_url`). The answer is
model output: the HTML renderers escape every character of it, and the Markdown renderer lets
none of it become HTML, a link or an image (:func:`markdown_text`).
"""

from __future__ import annotations

import html
import itertools
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from pipeline.grounding.mapping import GroundedAnswer, Source

__all__ = [
    "DOCUMENT_CSS",
    "markdown_text",
    "marker_groups",
    "render_html",
    "render_html_document",
    "render_markdown",
    "safe_http_url",
    "to_json_dict",
]


# Markers ------------------------------------------------------------------------------------

_ZWJ = "\u200d"


def _is_regional_indicator(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def _continues_cluster(text: str, i: int) -> bool:
    """Whether ``text[i]`` belongs to the grapheme cluster before it (a close approximation).

    Covers combining marks, variation selectors, ZWJ sequences, emoji modifiers, tag characters
    and regional-indicator pairs: the cases where a marker put at ``i`` would visibly break a
    character a reader sees as one.
    """
    if i <= 0 or i >= len(text):
        return False
    ch = text[i]
    if text[i - 1] == _ZWJ or ch == _ZWJ:
        return True
    if unicodedata.category(ch) in ("Mn", "Me", "Mc"):
        return True
    cp = ord(ch)
    if 0xFE00 <= cp <= 0xFE0F or 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F:
        return True
    if _is_regional_indicator(ch):
        run = 0
        j = i - 1
        while j >= 0 and _is_regional_indicator(text[j]):
            run += 1
            j -= 1
        return run % 2 == 1
    return text[i - 1] == "\r" and ch == "\n"


def _marker_position(text: str, start: int, end: int) -> int:
    """Where a citation's marker goes: after its last non-space character, never mid-cluster."""
    pos = end
    while pos > start + 1 and text[pos - 1].isspace():
        pos -= 1
    while _continues_cluster(text, pos):
        pos += 1
    return pos


def marker_groups(answer: GroundedAnswer) -> list[tuple[int, tuple[int, ...]]]:
    """``[(position, chunk indices)]`` sorted by position: one marker group per position.

    Citations whose markers land on the same code point offset share a group; its chunk
    indices are the union, sorted. Positions are ``str`` offsets into ``answer.text``.
    """
    groups: dict[int, set[int]] = {}
    for c in answer.citations:
        pos = _marker_position(answer.text, c.start, c.end)
        groups.setdefault(pos, set()).update(c.chunk_indices)
    return [(pos, tuple(sorted(idx))) for pos, idx in sorted(groups.items())]


def safe_http_url(url: str | None) -> str | None:
    """``url`` when it is an absolute http(s) URL with a host, else None."""
    if not url or url != url.strip() or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return url


def _destination(
    source: Source | None, index: int, destinations: Mapping[int, str] | None
) -> str | None:
    """The safe link target for chunk ``index``: resolved destination first, then the uri."""
    if destinations is not None:
        resolved = safe_http_url(destinations.get(index))
        if resolved is not None:
            return resolved
    return safe_http_url(source.uri) if source is not None else None


def _source_at(answer: GroundedAnswer, index: int) -> Source | None:
    return answer.sources[index] if 0 <= index < len(answer.sources) else None


def _cited_indices(answer: GroundedAnswer) -> list[int]:
    return sorted({i for c in answer.citations for i in c.chunk_indices})


# Markdown -----------------------------------------------------------------------------------

_MD_DEST_ESCAPES = {"<": "%3C", ">": "%3E", "\\": "%5C", " ": "%20"}
# A link or an image in model text: ``[text](destination "title")``, ``![alt](...)``, the
# destination bare (balanced parentheses one level deep) or in ``<...>``.
_MD_LINK = re.compile(
    r"!?\[([^\[\]\n]*)\]\(\s*(?:<[^<>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
    r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"
)
# An autolink in model text: ``<scheme:anything-but-spaces-and-angle-brackets>``.
_MD_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.\-]{1,31}:[^\s<>]*)>")
# Backslash-escaped in model text: a backslash (so that no escape of ours can be undone), "<"
# (raw HTML, autolinks) and "[" "]" (links, images, link reference definitions).
_MD_ESCAPED = frozenset("\\<[]")


def markdown_text(text: str) -> str:
    r"""Model text as Markdown that cannot make HTML, a link or an image.

    The same promise as the HTML output: the reader sees what the model wrote, and nothing in
    it becomes markup or a link. A link or an image the model wrote keeps its text (an
    autolink its http(s) address, as text) and loses its destination, whatever the scheme
    (``javascript:``, ``data:``, ``vbscript:``, ``https:``): the only links are the citation
    markers, to the sources. Then ``\``, ``<``, ``[`` and ``]`` are backslash-escaped,
    which CommonMark allows before any ASCII punctuation
    (https://spec.commonmark.org/0.31.2/#backslash-escapes): no raw HTML, autolink, link or
    reference definition can start. The rest of Markdown (emphasis, lists, headings, code)
    renders as the model meant; inside code spans and blocks the escapes show as written.
    """
    text = _MD_LINK.sub(lambda m: m.group(1), text)
    text = _MD_AUTOLINK.sub(lambda m: m.group(1) if safe_http_url(m.group(1)) else "", text)
    if not any(ch in _MD_ESCAPED for ch in text):
        return text
    return "".join("\\" + ch if ch in _MD_ESCAPED else ch for ch in text)


def _md_destination(url: str) -> str:
    return "<" + "".join(_MD_DEST_ESCAPES.get(ch, ch) for ch in url) + ">"


def _md_title(title: str) -> str:
    flat = " ".join(title.split())  # no line breaks: a blank line would end the definition
    return '"' + flat.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_markdown(answer: GroundedAnswer, destinations: Mapping[int, str] | None = None) -> str:
    """The answer with ``[n]`` markers (n = chunk index + 1) and a reference-style link list.

    The answer is model output: each stretch of it between markers goes through
    :func:`markdown_text`, so it shows as text, with no HTML, link or image of its own.

    Markers go after the last non-space character of each citation, inserted from the end
    backwards. Citations whose markers fall at the same place share one group, ``[1] [3]``:
    separated by a space, because CommonMark reads ``[1][3]`` as one link with text "1" to
    source 3. For the same reason a ``(`` or ``:`` right after a marker and a ``!`` right
    before one are backslash-escaped (the rendered text is unchanged): ``[1](x)`` would be a
    link, ``[1]: x`` at the start of a line a definition, ``![1]`` an image. Definitions use
    ``destinations[chunk index]`` when it is an http(s) URL, else the chunk's uri; sources with
    neither (or a non-http(s) one) get no definition, and their markers stay plain text.
    """
    text = answer.text
    groups = marker_groups(answer)
    cuts = [0, *(pos for pos, _ in groups), len(text)]
    pieces = [markdown_text(text[start:end]) for start, end in itertools.pairwise(cuts)]
    out = [pieces[0]]
    for (_, indices), tail in zip(groups, pieces[1:], strict=True):
        if out[-1].endswith("!"):  # never escaped by markdown_text: "![3]" would be an image
            out[-1] = out[-1][:-1] + "\\!"
        out.append(" ".join(f"[{i + 1}]" for i in indices))
        if tail.startswith(("(", ":")):
            tail = "\\" + tail  # "[3](x)" would be an inline link, "[3]: x" a definition
        out.append(tail)
    body = "".join(out)

    defs: list[str] = []
    for i in _cited_indices(answer):
        src = _source_at(answer, i)
        dest = _destination(src, i, destinations)
        if dest is None:
            continue
        line = f"[{i + 1}]: {_md_destination(dest)}"
        label = (src.title or src.domain) if src is not None else None
        if label:
            line += f" {_md_title(label)}"
        defs.append(line)
    if not defs:
        return body
    return body.rstrip("\n") + "\n\n" + "\n".join(defs) + "\n"


# HTML ---------------------------------------------------------------------------------------


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


def _html_marker(
    answer: GroundedAnswer, indices: Sequence[int], destinations: Mapping[int, str] | None
) -> str:
    links: list[str] = []
    for i in indices:
        src = _source_at(answer, i)
        dest = _destination(src, i, destinations)
        label = f"[{i + 1}]"
        if dest is None:
            links.append(label)
            continue
        title = (src.title or src.domain or "") if src is not None else ""
        title_attr = f' title="{_esc(title)}"' if title else ""
        links.append(
            f'<a href="{_esc(dest)}"{title_attr} rel="noopener noreferrer nofollow"'
            f' target="_blank">{label}</a>'
        )
    return '<sup class="cite">' + "".join(links) + "</sup>"


def _html_answer(answer: GroundedAnswer, destinations: Mapping[int, str] | None) -> str:
    """The escaped answer text with its markers and its unsupported spans wrapped."""
    text = answer.text
    # Events at code point positions: 0 = close span, 1 = marker, 2 = open span.
    events: list[tuple[int, int, str]] = []
    for s, e in answer.unsupported_spans:
        if text[s:e].strip():
            events.append((s, 2, '<span class="unsupported">'))
            events.append((e, 0, "</span>"))
    for pos, indices in marker_groups(answer):
        events.append((pos, 1, _html_marker(answer, indices, destinations)))
    events.sort(key=lambda ev: (ev[0], ev[1]))

    body: list[str] = []  # joined with "": the answer is shown with white-space: pre-wrap
    last = 0
    for pos, _, tag in events:
        body.append(_esc(text[last:pos]))
        body.append(tag)
        last = pos
    body.append(_esc(text[last:]))
    return '<div class="answer">' + "".join(body) + "</div>"


def _html_sources(answer: GroundedAnswer, destinations: Mapping[int, str] | None) -> list[str]:
    """The numbered source list (every source; the cited ones marked), as lines."""
    if not answer.sources:
        return []
    cited = set(_cited_indices(answer))
    out = ['<ol class="sources">']
    for src in answer.sources:
        n = src.index + 1
        dest = _destination(src, src.index, destinations)
        label = _esc(src.title or src.domain or src.uri or f"source {n}")
        item = (
            f'<a href="{_esc(dest)}" rel="noopener noreferrer nofollow" target="_blank">{label}</a>'
            if dest is not None
            else label
        )
        if src.domain and src.domain != src.title:
            item += f' <span class="domain">{_esc(src.domain)}</span>'
        if src.kind == "own":  # own retrieval: a document of the job's own index
            item += f' <span class="own">own index: {_esc(src.doc_id or "?")}</span>'
        cls = "source cited" if src.index in cited else "source"
        out.append(f'<li value="{n}" id="source-{n}" class="{cls}">{item}</li>')
    out.append("</ol>")
    return out


def render_html(answer: GroundedAnswer, destinations: Mapping[int, str] | None = None) -> str:
    """An HTML fragment: escaped answer, ``<sup>`` markers, unsupported spans, sources, and the
    search entry point in a sandboxed ``srcdoc`` iframe (no scripts, no same-origin access).

    The answer is model output and is treated as untrusted text: every character of it is
    HTML-escaped; only http(s) targets become links. Unsupported spans that are whitespace only
    are not wrapped.
    """
    out = ['<div class="grounded-answer">', _html_answer(answer, destinations)]
    out.extend(_html_sources(answer, destinations))
    if answer.search_entry_point_html:
        out.append(
            '<iframe class="search-entry-point" title="Google Search suggestions"'
            f' sandbox="{_SUGGESTIONS_SANDBOX}"'
            f' srcdoc="{_esc(_SUGGESTIONS_BASE + answer.search_entry_point_html)}"></iframe>'
        )
    out.append("</div>")
    return "\n".join(out) + "\n"


DOCUMENT_CSS = """\
body { font-family: system-ui, sans-serif; max-width: 48rem; margin: 2rem auto; padding: 0 1rem; }
.answer { white-space: pre-wrap; line-height: 1.5; }
.unsupported { background: #fff3cd; text-decoration: underline dotted #b58900; }
sup.cite a { text-decoration: none; }
.sources .domain { color: #666; font-size: 0.9em; }
iframe.search-entry-point { width: 100%; height: 7rem; border: 0; }
"""


def render_html_document(
    answer: GroundedAnswer,
    destinations: Mapping[int, str] | None = None,
    *,
    title: str = "Grounded answer",
) -> str:
    """A small standalone HTML page around :func:`render_html` (scripts disabled by CSP)."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="und">\n<head>\n<meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy"'
        " content=\"script-src 'none'; object-src 'none'; base-uri 'none'\">\n"
        f"<title>{_esc(title)}</title>\n<style>\n{DOCUMENT_CSS}</style>\n</head>\n<body>\n"
        f"{render_html(answer, destinations)}</body>\n</html>\n"
    )


# Google's Search suggestions are shown verbatim (their terms) in a sandbox that runs no script;
# a suggestion chip opens its search in a new tab (the <base> before the content says where
# links open, and changes nothing of the content itself).
_SUGGESTIONS_SANDBOX = "allow-popups allow-popups-to-escape-sandbox"
_SUGGESTIONS_BASE = '<base target="_blank">'


# JSON ---------------------------------------------------------------------------------------


def to_json_dict(answer: GroundedAnswer) -> dict[str, Any]:
    """Plain JSON-ready dict (lists, not tuples) of everything in the answer."""
    return {
        "grounded": answer.grounded,
        "text": answer.text,
        "citations": [
            {
                "start": c.start,
                "end": c.end,
                "text": c.text,
                "chunk_indices": list(c.chunk_indices),
                "confidence_scores": (
                    list(c.confidence_scores) if c.confidence_scores is not None else None
                ),
                "part_index": c.part_index,
                "byte_start": c.byte_start,
                "byte_end": c.byte_end,
                "support_index": c.support_index,
                "offsets_over": c.offsets_over,
            }
            for c in answer.citations
        ],
        "sources": [s.to_dict() for s in answer.sources],
        "coverage": answer.coverage,
        "unsupported_spans": [list(span) for span in answer.unsupported_spans],
        "web_search_queries": list(answer.web_search_queries),
        "retrieval_queries": list(answer.retrieval_queries),
        "image_search_queries": list(answer.image_search_queries),
        "search_entry_point_html": answer.search_entry_point_html,
        "warnings": list(answer.warnings),
        "maps_widget_token": answer.maps_widget_token,
        "dynamic_retrieval_score": answer.dynamic_retrieval_score,
        "url_context": [{"url": u, "status": st} for u, st in answer.url_statuses],
        "tool_parts": answer.tool_parts,
    }
