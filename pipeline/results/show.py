"""``ground show JOB ID``: one stored question as a person reads it. Pure rendering, no IO.

The answer is drawn by :mod:`pipeline.grounding`'s renderers (the same as ``ground cite``), with
each citation marker linked to the destination the resolver stored, falling back to the
source's own uri. Everything from the model or the input is untrusted: HTML escapes it, and
Markdown shows it as text, with no HTML, link or image of its own
(:func:`pipeline.grounding.markdown_text`); the caller passes the result through
:func:`pipeline.watch.terminal.printable` before a terminal sees it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import orjson

from pipeline.grounding.render import DOCUMENT_CSS, render_html, render_markdown, safe_http_url
from pipeline.results.export.records import destinations, grounded_answer, to_record, version_fields
from pipeline.store.records import StoredQuestion

__all__ = [
    "render_show",
    "render_show_versions",
]

FORMATS = ("markdown", "html", "json")


def _json_block(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def _fence(text: str) -> str:
    """A fenced code block that ``text`` cannot close (the fence is longer than any run)."""
    longest = max((len(run) for run in text.split("\n") if set(run) == {"`"}), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _md_inline(text: str) -> str:
    """Model or input text on one Markdown line, shown literally."""
    flat = " ".join(text.split())
    return "".join("\\" + ch if ch in "\\`*_[]<>#|" else ch for ch in flat)


def _md_url(url: str) -> str:
    """An http(s) URL (:func:`safe_http_url`) as a CommonMark autolink. No backslash escape
    is read inside one, so the characters that would end it are percent-encoded instead."""
    return "<" + url.replace("<", "%3C").replace(">", "%3E").replace(" ", "%20") + ">"


def render_show_markdown(stored: StoredQuestion, version_state: str | None = None) -> str:
    """``version_state``: the state of an earlier answer version (:func:`version_state`),
    shown instead of the question's current state and error."""
    record = to_record(stored)
    answer = grounded_answer(stored)
    lines = [f"# {_md_inline(record['id'])}", "", f"**Question:** {_md_inline(record['question'])}"]
    state = f"**State:** {version_state or record['state']}"
    if answer is not None:
        state += f" · grounded: {'yes' if answer.grounded else 'no'}"
        state += f" · coverage {answer.coverage:.0%}"
        if record["route"] == "own":
            state += " · answered by own retrieval (the job's index)"
    state += f" · cost ${record['cost_usd']:.6f}"
    lines += ["", state]
    if version_state is None and (record["error_class"] or record["last_error"]):
        error = f"{record['error_class'] or ''}: {record['last_error'] or ''}".strip(": ")
        lines += ["", f"**Error:** {_md_inline(error)}"]
    if answer is None:
        lines += ["", "_No answer stored yet._"]
        return "\n".join(lines) + "\n"
    lines += ["", "## Answer", "", render_markdown(answer, destinations(stored)).rstrip("\n")]
    if record["sources"]:
        lines += ["", "## Sources", ""]
        for s in record["sources"]:
            label = _md_inline(s["title"] or s["domain"] or s["uri"] or f"source {s['index'] + 1}")
            where = safe_http_url(s["destination"]) or safe_http_url(s["uri"]) or ""
            status = s["resolve_status"]
            if s["kind"] == "own":
                status = f"own index: {_md_inline(s['doc_id'] or '?')}"
            lines.append(
                f"{s['index'] + 1}. {label} ({status})" + (f" {_md_url(where)}" if where else "")
            )
    queries = record["web_search_queries"] + record["retrieval_queries"]
    if queries:
        lines += ["", "## Queries", ""] + [f"- {_md_inline(q)}" for q in queries]
    if record["structured"] is not None or record["structured_errors"]:
        valid = {True: "valid", False: "invalid", None: "not checked"}[record["structured_valid"]]
        lines += ["", f"## Structured ({valid})", "", _fence(_json_block(record["structured"]))]
        if record["provenance"]:
            lines += ["", "Provenance:", "", _fence(_json_block(record["provenance"]))]
        if record["structured_errors"]:
            lines += ["", "Errors:"] + [f"- {_md_inline(e)}" for e in record["structured_errors"]]
    return "\n".join(lines) + "\n"


# The cite document's style, and room for the structured object's JSON.
_CSS = DOCUMENT_CSS + "pre { background: #f6f6f6; padding: 0.5rem; overflow: auto; }\n"


def render_show_html(stored: StoredQuestion, version_state: str | None = None) -> str:
    """``version_state``: as for :func:`render_show_markdown`."""
    record = to_record(stored)
    answer = grounded_answer(stored)
    esc = html.escape
    body = [
        f"<h1>{esc(record['id'])}</h1>",
        f'<p class="question"><strong>Question:</strong> {esc(record["question"])}</p>',
        f"<p><strong>State:</strong> {esc(version_state or record['state'])}"
        + (" · answered by own retrieval (the job's index)" if record["route"] == "own" else "")
        + "</p>",
    ]
    if version_state is None and record["last_error"]:
        body.append(
            f'<p class="error">{esc(record["error_class"] or "")}: {esc(record["last_error"])}</p>'
        )
    if answer is not None:
        body.append(render_html(answer, destinations(stored)))
        queries = record["web_search_queries"] + record["retrieval_queries"]
        if queries:
            body.append("<h2>Queries</h2><ul>")
            body += [f"<li>{esc(q)}</li>" for q in queries]
            body.append("</ul>")
    if record["structured"] is not None:
        body.append("<h2>Structured</h2>")
        body.append(f"<pre>{esc(_json_block(record['structured']))}</pre>")
        if record["provenance"]:
            body.append(f"<pre>{esc(_json_block(record['provenance']))}</pre>")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="und">\n<head>\n<meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy"'
        " content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:;"
        " base-uri 'none'; form-action 'none'\">\n"
        f"<title>{esc(record['id'])}</title>\n<style>\n{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def render_show(stored: StoredQuestion, fmt: str, version_state: str | None = None) -> str:
    """One question in one of :data:`FORMATS` (JSON is its export record); ``version_state``:
    an earlier answer version's state, shown instead of the question's."""
    if fmt == "markdown":
        return render_show_markdown(stored, version_state)
    if fmt == "html":
        return render_show_html(stored, version_state)
    if fmt == "json":
        return _json_block(to_record(stored)) + "\n"
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _version_heading(stored: StoredQuestion) -> str:
    v = version_fields(stored)
    if v["answer_version"] is None:
        return "no answer stored"
    superseded = v["answer_superseded_at"]
    when = "latest" if superseded is None else f"superseded {superseded.isoformat()}"
    line = f"answer version {v['answer_version']} ({when})"
    if v["answer_changed"] is not None:
        moved = ", ".join(v["answer_changes"] or []) or "nothing"
        line += f"; changed against the version before: {moved}"
    if v["structured_version"] is not None:
        line += f"; structured version {v['structured_version']}"
    return line


def version_state(stored: StoredQuestion, after: StoredQuestion | None) -> str | None:
    """The state of one answer version: None for the latest (the question's own state is
    its); for an earlier one, what that answer was and what replaced it (``after``, the
    version that followed it)."""
    answer = grounded_answer(stored)
    if after is None or answer is None:
        return None
    record = to_record(stored)
    if not answer.grounded:
        what = "ungrounded"
    elif not record["sources"]:
        what = "grounded, citing no source"
    else:
        what = "grounded"
    followed = to_record(after)
    if record["route"] != "own" and followed["route"] == "own":
        why = "the fallback answered it through own retrieval"
    else:
        why = "asked again"
    return f"superseded ({what}; {why})"


def render_show_versions(versions: Sequence[StoredQuestion], fmt: str) -> str:
    """``ground show --all-versions``: every stored answer version, oldest first, each headed
    with its own state; JSON is a list of export records with their version fields."""
    if fmt == "json":
        return _json_block([to_record(v, versions=True) for v in versions]) + "\n"
    parts = []
    for index, stored in enumerate(versions):
        after = versions[index + 1] if index + 1 < len(versions) else None
        state = version_state(stored, after)
        heading = _version_heading(stored)
        if fmt == "html":
            parts.append(f'<p class="version"><em>{html.escape(heading)}</em></p>')
        else:
            parts.append(f"_{_md_inline(heading)}_\n\n")
        parts.append(render_show(stored, fmt, state))
    return ("\n" if fmt == "markdown" else "").join(parts)
