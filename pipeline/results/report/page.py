"""The report page's pieces: pure functions from summaries and stored rows to HTML text.

Untrusted everywhere: questions, answers, titles, queries and the structured object are
escaped (the answer is drawn by :func:`pipeline.grounding.render_html`, which escapes it and
puts the search entry point's HTML, verbatim, in a ``srcdoc`` iframe sandboxed without
scripts). The page's only script is :data:`SCRIPT`; the Content-Security-Policy allows it by
its hash and nothing else, so even an injected ``<script>`` or ``onerror=`` could not run.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import orjson

from pipeline.grounding.render import render_html
from pipeline.results.billing import BillingStatus
from pipeline.results.export.records import destinations, grounded_answer, to_record
from pipeline.results.report.figures import ClassFigures, chart_groups, percent
from pipeline.results.report.svg import bar_chart, paired_bar_chart
from pipeline.results.report.verification import CSS as VERIFICATION_CSS
from pipeline.results.report.verification import answer_marks
from pipeline.results.status import JobStatus
from pipeline.store.citation_verdicts import VerdictRow
from pipeline.store.records import StoredQuestion

__all__ = [
    "CSS",
    "routes",
]

esc = html.escape

# Search and filter over the table's rows; the only script on the page.
SCRIPT = """\
(function () {
  var search = document.getElementById("search");
  var state = document.getElementById("state");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#answers tbody tr"));
  var counter = document.getElementById("shown");
  function apply() {
    var needle = search.value.trim().toLowerCase();
    var wanted = state.value;
    var shown = 0;
    rows.forEach(function (row) {
      var ok = (!wanted || row.dataset.state === wanted) &&
        (!needle || row.dataset.text.indexOf(needle) !== -1);
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    counter.textContent = String(shown);
  }
  search.addEventListener("input", apply);
  state.addEventListener("change", apply);
  apply();
})();
"""


def script_hash(script: str = SCRIPT) -> str:
    digest = hashlib.sha256(script.encode()).digest()
    return "sha256-" + base64.b64encode(digest).decode()


CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    f"script-src '{script_hash()}'; base-uri 'none'; form-action 'none'"
)

CSS = """\
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
h1 { margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 0.75rem; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.5rem 0.9rem; min-width: 8rem; }
.card b { display: block; font-size: 1.4rem; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5rem; }
.charts figure { margin: 0; }
svg.chart { font-size: 12px; max-width: 100%; height: auto; }
svg.chart .bar { fill: #4a7bd0; }
table { border-collapse: collapse; width: 100%; margin-top: 1rem; }
th, td { border-top: 1px solid #ddd; padding: 0.4rem; vertical-align: top; text-align: left; }
td.answer-cell { min-width: 28rem; }
.answer { white-space: pre-wrap; line-height: 1.45; }
.unsupported { background: #fff3cd; text-decoration: underline dotted #b58900; }
sup.cite a { text-decoration: none; }
.sources { font-size: 0.9em; }
.sources .domain { color: #666; }
iframe.search-entry-point { width: 100%; height: 5.5rem; border: 0; }
pre { white-space: pre-wrap; font-size: 0.85em; background: #f6f6f6; padding: 0.4rem; }
.controls { display: flex; gap: 0.75rem; align-items: center; margin-top: 1.5rem; }
.state { font-family: monospace; }
.route { color: #555; font-size: 0.85em; }
.sources .own { color: #555; font-size: 0.85em; }
.sources .cited { font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dl.facts dt { color: #555; }
dl.facts dd { margin: 0; }
.caveat, .note { color: #444; }
table.problems tr.problem th { color: #a12; }
table.problems .snippet { color: #444; }
table.problems .error { font-family: monospace; font-size: 0.85em; color: #a12; }
table.routes { width: auto; }
.figure-pair { display: flex; flex-wrap: wrap; gap: 1.5rem; align-items: flex-start; }
tr.example td:first-child::after { content: " (problem example)"; color: #a12; }
tr:target { outline: 2px solid #b58900; }
"""
CSS += VERIFICATION_CSS


def head(title: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="und">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n"
    )


def anchor_id(qid: str) -> str:
    """The id of a question's row: ``q-`` and its id, percent-encoded but for letters, digits
    and ``-._~``, so any input id gives a valid, distinct id that ``#`` + it links to."""
    return "q-" + quote(qid, safe="")


def _card(label: str, value: str) -> str:
    return f'<div class="card"><b>{esc(value)}</b>{esc(label)}</div>'


def billing(status: BillingStatus) -> str:
    """The ledger against the bill: what ``ground reconcile`` found, or the sign before it."""
    cards = [_card("ledger (USD, what the responses showed)", f"${status.ledger_usd:.4f}")]
    if status.billed_usd is not None and status.reconciled_at is not None:
        cards.append(_card("reconciled bill (USD)", f"${status.billed_usd:.4f}"))
        cards.append(_card("last reconciled (UTC)", f"{status.reconciled_at:%Y-%m-%d %H:%M}"))
    if status.factor is not None:
        cards.append(_card("billed queries per grounded request", f"{status.factor:.2f}"))
    share = status.listing_none_share
    if status.billed_usd is None and share is not None:
        cards.append(_card("grounded responses listing no query", percent(share)))
    return (
        '<section id="billing">\n<h2>The ledger and the bill</h2>\n'
        f'<div class="cards">{"".join(cards)}</div>\n</section>\n'
    )


def source_policy(counts: dict[str, int]) -> str:
    """The sources whose destination broke the job's ``[sources]`` rules, by what was done
    to them (nothing when none did)."""
    if not any(counts.values()):
        return ""
    cards = "".join(_card(f"sources {mark}", f"{n:,}") for mark, n in sorted(counts.items()))
    return (
        '<section id="source-policy">\n<h2>Source policy ([sources])</h2>\n'
        f'<div class="cards">{cards}</div>\n</section>\n'
    )


def summary(
    status: JobStatus,
    coverage: float | None,
    latency: Sequence[tuple[str, int]],
) -> str:
    """The summary section: figures over every question of the job, and the charts."""
    cards = [
        _card("questions", f"{status.total:,}"),
        _card("answered", f"{status.answers:,}"),
        _card("grounded rate", percent(status.grounded_rate)),
        _card("mean coverage (grounded)", percent(coverage)),
        _card("spend (USD, estimate)", f"${status.spend_usd:.4f}"),
        _card("calls", f"{status.calls:,}"),
        _card("structured valid", f"{status.structured_valid:,}"),
    ]
    states = [(s, n) for s, n in status.states.items() if n]
    resolution = sorted(status.sources.items())
    charts = [
        ("Questions by state", bar_chart("Questions by state", states)),
        ("Source resolution", bar_chart("Source resolution", resolution)),
        ("Answer latency (call 1)", bar_chart("Answer latency", latency)),
    ]
    figures = "".join(
        f"<figure><figcaption>{esc(caption)}</figcaption>{svg}</figure>" for caption, svg in charts
    )
    return (
        '<section id="summary">\n<h2>Summary (every question)</h2>\n'
        f'<div class="cards">{"".join(cards)}</div>\n'
        f'<div class="charts">{figures}</div>\n</section>\n'
    )


def routes(figures: Sequence[ClassFigures]) -> str:
    """Managed grounding beside own retrieval, per class (every answer version counted): the
    table and its chart, both drawn from ``figures``; nothing when no class has an answer."""
    if not figures:
        return ""
    rows = "".join(
        f'<tr data-class="{esc(f.qclass)}"><td>{esc(f.qclass)}</td><td>{f.finished:,}</td>'
        f"<td>{f.managed_answers:,}</td><td>{f.managed_shown}</td>"
        f"<td>{f.own_answers:,}</td><td>{f.own_shown}</td>"
        f"<td>{percent(f.own_coverage)}</td></tr>"
        for f in figures
    )
    chart = paired_bar_chart(
        "Grounded and cited, by class", ("managed", "own retrieval"), chart_groups(figures)
    )
    return (
        '<section id="routes">\n<h2>Managed grounding beside own retrieval, by class</h2>\n'
        '<p class="note">Every answer version: a managed answer that missed and was asked'
        " again through the job's own index counts for both. Grounded and cited: grounded"
        " and citing at least one source (a rate over that path's answers; – where the path"
        " gave none).</p>\n"
        '<div class="figure-pair"><table class="routes"><thead><tr><th>class</th>'
        "<th>finished</th><th>managed answers</th><th>managed grounded &amp; cited</th>"
        "<th>own answers</th><th>own grounded &amp; cited</th><th>own mean coverage</th>"
        f"</tr></thead>\n<tbody>{rows}</tbody></table>\n"
        '<figure id="class-chart"><figcaption>Grounded and cited, by class: managed against'
        f" own retrieval</figcaption>{chart}</figure></div>\n</section>\n"
    )


def table_start(states: Sequence[str], description: str) -> str:
    """The answers' table up to its first row; ``description`` (plain text) says what it
    holds."""
    options = "".join(f'<option value="{esc(s)}">{esc(s)}</option>' for s in states)
    return (
        '<section id="table">\n<h2>Answers</h2>\n'
        f'<p class="sample">{esc(description)}</p>\n'
        '<div class="controls"><input id="search" type="search" placeholder="Search"'
        ' aria-label="Search the answers">'
        '<select id="state" aria-label="Filter by state"><option value="">all states</option>'
        f"{options}</select>"
        '<span><span id="shown">0</span> shown</span></div>\n'
        '<table id="answers">\n<thead><tr><th>id</th><th>question</th><th>state</th>'
        "<th>answer, citations and sources</th><th>structured</th></tr></thead>\n<tbody>\n"
    )


def _pre(value: Any) -> str:
    return f"<pre>{esc(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())}</pre>"


def row(
    stored: StoredQuestion, *, example: bool = False, verdicts: Sequence[VerdictRow] | None = None
) -> str:
    """One table row, its id :func:`anchor_id`; ``data-text`` (lower-cased, escaped) is what
    the search box matches. ``example``: a problem's example from outside the selection.
    ``verdicts``: the answer's citation verdicts, marked under it."""
    record = to_record(stored, verdicts=verdicts)
    answer = grounded_answer(stored)
    haystack = " ".join(
        str(part or "")
        for part in (record["id"], record["question"], record["answer"], record["class"])
    ).lower()
    if answer is not None:
        cell = render_html(answer, destinations(stored)) + answer_marks(record)
    else:
        error = record["last_error"] or "no answer stored yet"
        cell = f'<p class="no-answer">{esc(error)}</p>'
    structured = ""
    if record["structured"] is not None:
        valid = "valid" if record["structured_valid"] else "invalid"
        structured = f"<details><summary>{valid}</summary>{_pre(record['structured'])}</details>"
    grounded = {True: "grounded", False: "ungrounded", None: ""}[record["grounded"]]
    if record["route"] == "own":
        grounded += '<br><span class="route">own retrieval</span>'
    elif record["route"] == "managed":
        grounded += '<br><span class="route">managed</span>'
    haystack += f" {record['route'] or ''}"
    marked = ' class="example"' if example else ""
    return (
        f'<tr id="{esc(anchor_id(record["id"]))}"{marked}'
        f' data-state="{esc(record["state"])}" data-text="{esc(haystack)}">'
        f"<td>{esc(record['id'])}</td>"
        f"<td>{esc(record['question'])}</td>"
        f'<td class="state">{esc(record["state"])}<br>{grounded}</td>'
        f'<td class="answer-cell">{cell}</td>'
        f"<td>{structured}</td></tr>\n"
    )


def table_end(extras: int) -> str:
    """The answers' table closed; ``extras``: problem examples added from outside the
    selection (marked in their rows), said once."""
    note = (
        f'<p class="note">Besides the selection, {extras:,} problem'
        f" example{'s' if extras != 1 else ''} from the problems section (marked).</p>\n"
        if extras
        else ""
    )
    return f"</tbody>\n</table>\n{note}</section>\n"


def tail() -> str:
    return f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
