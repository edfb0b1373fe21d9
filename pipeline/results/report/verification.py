"""The report's verification: the citation precision ``ground verify`` measured, a card per
class with its 95 % interval, and each answer's verdict marks on the sources it cites.

Read from the stored verdicts (:mod:`pipeline.results.precision`); nothing when none are
stored. Pure. The quotes are model output, the URLs and classes come from outside: every one
is escaped, and a URL is a link only when it is an http(s) URL.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.grounding.render import safe_http_url
from pipeline.results.precision import MARKS, Figures, JobPrecision
from pipeline.results.report.figures import percent

__all__ = [
    "answer_marks",
    "precision_section",
]

esc = html.escape
QUOTE_CHARS = 300  # a quote longer than this is cut in the table (the export has it whole)

CSS = """\
.verdict-supported { color: #1a7f37; }
.verdict-partly { color: #9a6700; }
.verdict-not_supported, .verdict-contradicted { color: #a12; }
.verdict-unreadable, .verdict-no_verdict { color: #666; }
ul.verdicts { font-size: 0.85em; padding-left: 1.2rem; }
ul.verdicts q { color: #444; }
"""


def _interval(f: Figures) -> str:
    if f.tally.precision is None:
        return "no readable citation checked"
    low, high = f.tally.interval
    return f"95% CI {percent(low)}–{percent(high)}"


def _card(label: str, f: Figures) -> str:
    t = f.tally
    checked = sum(t.counts.values())
    return (
        f'<div class="card precision" data-class="{esc(label)}">'
        f"<b>{esc(percent(t.precision))}</b>{esc(label)}<br>"
        f"<small>{esc(_interval(f))}; {t.supported:,}/{t.readable:,} readable supported,"
        f" {checked:,} checked; answers verified {f.answers_verified:,}/"
        f"{f.answers_checked:,}</small></div>"
    )


def precision_section(found: JobPrecision | None) -> str:
    """The citation-precision section: the job's card, then one per class."""
    if found is None:
        return ""
    cards = [_card("job", found.job)]
    cards.extend(_card(f"class {c or '(none)'}", f) for c, f in sorted(found.by_class.items()))
    return (
        '<section id="citation-precision">\n<h2>Citation precision</h2>\n'
        f'<p class="note">Checked by {esc(found.model)} (<code>ground verify</code>):'
        " supported ÷ readable checked (citation, source) pairs; <em>partly</em> is not"
        " counted as supported; pages Google could not read are outside the ratio. An"
        " answer is verified when every readable pair it had checked is supported.</p>\n"
        f'<div class="cards">{"".join(cards)}</div>\n</section>\n'
    )


def _where(verdict: Mapping[str, Any], sources: Sequence[Mapping[str, Any]]) -> str:
    """The checked source: its index (text sources) or the URL read."""
    index = verdict.get("chunk_index")
    if index is not None:
        title = next((s.get("title") for s in sources if s.get("index") == index), None)
        return f"[{int(index) + 1}] {esc(title or '')}".rstrip()
    url = verdict.get("url") or ""
    safe = safe_http_url(url)
    if safe is None:
        return esc(url)
    return f'<a href="{esc(safe)}" rel="noreferrer noopener" target="_blank">{esc(url)}</a>'


def _quote(text: str | None) -> str:
    if not text:
        return ""
    cut = text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"
    return f" <q>{esc(cut)}</q>"


def answer_marks(record: Mapping[str, Any]) -> str:
    """An answer's verdicts, one line per checked (citation, source) pair: the mark, the
    verdict, the citation's number, the source and the deciding quote; nothing unchecked."""
    verdicts = record.get("citation_verdicts") or ()
    if not verdicts:
        return ""
    sources = record.get("sources") or ()
    fraction = record.get("verified_fraction")
    verified = {True: "verified", False: "not verified", None: ""}[record.get("verified")]
    items = "".join(
        f'<li class="verdict-{esc(v["verdict"])}">{MARKS.get(v["verdict"], "?")}'
        f" {esc(v['verdict'])} · citation {int(v['citation']) + 1} · {_where(v, sources)}"
        f"{_quote(v.get('quote'))}</li>"
        for v in verdicts
    )
    return (
        f'<details class="verification"><summary>{esc(verified)}: verified fraction'
        f" {esc(percent(fraction))}</summary>"
        f'<ul class="verdicts">{items}</ul></details>'
    )
