"""The report's header: when it was made, from which model, backend and endpoint (a local
emulator said in words, a URL shown without credentials or query), with the spend's caveat;
and the legend of how an answer is drawn. Pure.
"""

from __future__ import annotations

import datetime as dt
import html
from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import urlsplit

from pipeline.grounding.hosts import is_local_url

__all__ = [
    "ReportContext",
    "render_header",
    "render_legend",
    "spend_caveat",
]

BACKEND_NAMES = {"developer": "Gemini Developer API", "vertex": "Vertex AI"}


@dataclass(frozen=True, slots=True)
class ReportContext:
    """What the page says about where its answers came from."""

    generated_at: dt.datetime
    model: str
    backend: str  # "developer" | "vertex"
    base_url: str  # "" = Google's endpoint for the backend


def shown_url(base_url: str) -> str:
    """``base_url`` as the page may show it: scheme, host, port and path; never a user name,
    password, query or fragment (where a key could ride along)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


def endpoint_label(backend: str, base_url: str) -> str:
    """Where the calls went, in words."""
    if not base_url:
        return f"Google's {BACKEND_NAMES.get(backend, backend)} endpoint"
    if is_local_url(base_url):
        return f"local emulator at {shown_url(base_url)}"
    return f"custom endpoint at {shown_url(base_url)}"


def spend_caveat(base_url: str, spend_usd: Decimal) -> str:
    spend = f"${spend_usd:.4f}"
    if is_local_url(base_url):
        return (
            f"Spend ({spend}) is an estimate at Google's list prices; nothing was billed:"
            " the answers came from a local endpoint."
        )
    return (
        f"Spend ({spend}) is an estimate at list prices from the calls' token counts;"
        " the provider's bill is the authority."
    )


def render_header(context: ReportContext, job_name: str, spend_usd: Decimal) -> str:
    esc = html.escape
    when = context.generated_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    facts = (
        ("generated", when),
        ("model", context.model),
        ("backend", BACKEND_NAMES.get(context.backend, context.backend)),
        ("endpoint", endpoint_label(context.backend, context.base_url)),
    )
    items = "".join(f'<dt>{esc(k)}</dt><dd data-fact="{esc(k)}">{esc(v)}</dd>' for k, v in facts)
    return (
        f'<header id="about">\n<h1>Job {esc(job_name)}</h1>\n'
        f'<dl class="facts">{items}</dl>\n'
        f'<p class="caveat">{esc(spend_caveat(context.base_url, spend_usd))}</p>\n</header>\n'
    )


def render_legend() -> str:
    """How an answer is drawn (the classes :func:`pipeline.grounding.render_html` uses)."""
    return (
        '<section id="legend">\n<h2>How to read an answer</h2>\n<ul class="legend">'
        '<li><span class="answer">Plain text<sup class="cite"><a>[1]</a></sup></span>:'
        " supported by the sources its marker names; [1] is the first source listed under"
        " the answer (a link to it).</li>"
        '<li><span class="answer"><span class="unsupported">Highlighted text</span></span>:'
        " no source supports it (the model's own words).</li>"
        "<li>Sources in <b>bold</b> are cited; the others were consulted. <i>own index</i>"
        " marks a document of the job's own index (own retrieval).</li>"
        "<li>Google Search suggestions are shown as Google sent them, in a frame that runs"
        " no script.</li></ul>\n</section>\n"
    )
