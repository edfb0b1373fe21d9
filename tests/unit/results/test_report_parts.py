"""The report's pure parts: the table's seeded sample and selection, the per-class figures
its table and chart share, the problems' counts and examples, anchors, and the header."""

from __future__ import annotations

import datetime as dt
import random
import re
from decimal import Decimal

from pipeline.results.report.figures import chart_groups, class_figures, percent
from pipeline.results.report.header import (
    ReportContext,
    endpoint_label,
    render_header,
    shown_url,
)
from pipeline.results.report.page import anchor_id, routes
from pipeline.results.report.problems import (
    UNRESOLVED_LINKS,
    ProblemTally,
    render_problems,
)
from pipeline.results.report.selection import (
    Sampler,
    TableFill,
    TableSelection,
    pick_sample,
)
from pipeline.results.report.svg import paired_bar_chart
from pipeline.store.status import ClassRoutes, ProblemRow, RouteStats
from pipeline.store.trial import sample_key

IDS = [f"q{i:05d}" for i in range(500)]


# The sample ---------------------------------------------------------------------------------


def test_a_sample_is_the_same_for_the_same_seed_whatever_the_order() -> None:
    shuffled = IDS[:]
    random.Random(1).shuffle(shuffled)
    first = pick_sample(IDS, 20, seed=7)
    assert len(first) == 20 and first <= set(IDS)
    assert pick_sample(shuffled, 20, seed=7) == first
    assert pick_sample(IDS, 20, seed=8) != first


def test_a_sample_takes_the_smallest_keys_ground_run_uses() -> None:
    expected = sorted(IDS, key=lambda qid: sample_key(3, qid))[:25]
    assert pick_sample(IDS, 25, seed=3) == frozenset(expected)
    # Not the first N by load order: a sample spreads over the job.
    assert pick_sample(IDS, 25, seed=3) != frozenset(IDS[:25])


def test_a_sample_larger_than_the_scope_is_the_whole_scope() -> None:
    sampler = Sampler(50, seed=0)
    for qid in IDS[:10]:
        sampler.add(qid)
    assert sampler.ids() == frozenset(IDS[:10]) and sampler.seen == 10
    assert pick_sample(IDS, 0, seed=0) == frozenset()


def test_the_selection_describes_itself() -> None:
    first = TableSelection(limit=5)
    assert first.describe(5, 24).startswith("The table holds the first 5 of 24 questions")
    sample = TableSelection(sample=3, seed=9, qclass="geo", states=("done", "ungrounded"))
    text = sample.describe(3, 8)
    assert "a random sample of 3 of 8 questions (seed 9" in text
    assert "of class 'geo', state done or ungrounded" in text
    assert sample.scope.qclass == "geo" and sample.scope.states == ("done", "ungrounded")


def test_the_table_takes_the_first_n_then_the_examples_outside_them() -> None:
    fill = TableFill(3, None, frozenset({"q00001", "q00007"}))
    placed = [fill.place(qid) for qid in IDS[:6]]
    assert placed == ["row", "row", "row", None, None, None]
    assert not fill.done  # q00007 is still to come
    assert fill.place("q00007") == "example" and fill.done
    assert (fill.rows, fill.extras) == (3, 1)


def test_the_table_takes_the_sample_and_the_examples_outside_it() -> None:
    chosen = pick_sample(IDS, 4, seed=2)
    outside = next(qid for qid in IDS if qid not in chosen)
    fill = TableFill(4, chosen, frozenset({outside, min(chosen)}))
    placed = {qid: fill.place(qid) for qid in IDS}
    assert {q for q, p in placed.items() if p == "row"} == chosen
    assert {q for q, p in placed.items() if p == "example"} == {outside}
    assert fill.done and (fill.rows, fill.extras) == (4, 1)


# Problems -----------------------------------------------------------------------------------


def _problem(row_key: int, state: str = "done", links: int = 0) -> ProblemRow:
    qid = IDS[row_key]
    return ProblemRow(row_key, qid, state, f"question {qid}", None, links)


def test_problems_are_counted_per_kind_with_the_first_as_example() -> None:
    tally = ProblemTally(TableSelection().order_key)
    for row in (
        _problem(9, "failed"),
        _problem(4, "failed"),
        _problem(5, "ungrounded", links=2),
        _problem(6, "done", links=1),
    ):
        tally.add(row)
    found = {p.kind: p for p in tally.problems()}
    assert [p.kind for p in tally.problems()] == [
        "failed",
        "blocked",
        "ungrounded",
        "invalid",
        UNRESOLVED_LINKS,
    ]
    assert found["failed"].count == 2 and found["failed"].example == _problem(4, "failed")
    assert found["blocked"].count == 0 and found["blocked"].example is None
    assert found[UNRESOLVED_LINKS].count == 2 and found[UNRESOLVED_LINKS].links == 3
    assert found[UNRESOLVED_LINKS].example == _problem(5, "ungrounded", links=2)
    assert tally.example_ids() == {IDS[4], IDS[5]}


def test_a_sample_holds_the_example_whenever_it_holds_any_question_of_the_kind() -> None:
    rng = random.Random(4)
    for seed in range(30):
        selection = TableSelection(sample=40, seed=seed)
        chosen = pick_sample(IDS, 40, seed)
        failed = rng.sample(range(len(IDS)), 12)
        tally = ProblemTally(selection.order_key)
        for key in failed:
            tally.add(_problem(key, "failed"))
        example = tally.problems()[0].example
        assert example is not None
        assert (example.qid in chosen) == any(IDS[k] in chosen for k in failed)


def test_the_problems_section_links_each_example_and_escapes_its_text() -> None:
    tally = ProblemTally(TableSelection().order_key)
    tally.add(ProblemRow(0, 'x "1" <b>', "blocked", "<script>alert(1)</script>", "<i>", 0))
    section = render_problems(tally.problems(), "every question of the job")
    assert f'href="#{anchor_id(chr(120) + " " + chr(34) + "1" + chr(34) + " <b>")}"' in section
    assert "<script>" not in section and "&lt;script&gt;" in section
    assert "<i>" not in section and "<b>" not in section


# Anchors ------------------------------------------------------------------------------------


def test_anchors_are_safe_and_distinct() -> None:
    ids = ["q00007", "a b", "a%20b", 'x"><script>', "kraków", "a/b#c", ""]
    anchors = [anchor_id(qid) for qid in ids]
    assert anchors[0] == "q-q00007"
    assert len(set(anchors)) == len(ids)
    assert all(re.fullmatch(r"q-[A-Za-z0-9_.~%-]*", a) for a in anchors)


# Per-class figures --------------------------------------------------------------------------


def _routes() -> list[ClassRoutes]:
    return [
        ClassRoutes(
            "cities", 180, 180, RouteStats(180, 180, 0, 0.8), RouteStats()
        ),  # no own answers
        ClassRoutes("airports", 20, 20, RouteStats(20, 10, 6, 0.7), RouteStats(16, 16, 0, 0.997)),
        ClassRoutes("empty", 3, 0, RouteStats(), RouteStats()),
    ]


def test_class_figures_are_the_cited_rates_sorted_by_class() -> None:
    figures = class_figures(_routes())
    assert [f.qclass for f in figures] == ["airports", "cities"]  # no answers: left out
    airports, cities = figures
    assert (airports.managed_shown, airports.own_shown) == ("20.0%", "100.0%")
    assert (cities.managed_shown, cities.own_shown) == ("100.0%", "–")
    assert percent(None) == "–" and percent(0.5) == "50.0%"


def test_the_chart_prints_what_the_table_prints() -> None:
    figures = class_figures(_routes())
    groups = chart_groups(figures)
    assert groups == [
        ("airports", ((20.0, "20.0%"), (100.0, "100.0%"))),
        ("cities", ((100.0, "100.0%"), (None, "–"))),
    ]
    section = routes(figures)
    for qclass, ((_, managed), (_, own)) in groups:
        cells = re.search(
            rf'<tr data-class="{qclass}"><td>{qclass}</td><td>[\d,]+</td><td>[\d,]+</td>'
            r"<td>([^<]*)</td><td>[\d,]+</td><td>([^<]*)</td>",
            section,
        )
        assert cells is not None and cells.groups() == (managed, own)
        for series, shown in (("managed", managed), ("own retrieval", own)):
            bar = re.search(
                rf'<g data-group="{qclass}" data-series="{series}">.*?'
                r'<text class="value"[^>]*>([^<]*)</text>',
                section,
            )
            assert bar is not None and bar.group(1) == shown
    assert routes([]) == ""


def test_the_paired_chart_escapes_labels_and_draws_no_bar_for_none() -> None:
    chart = paired_bar_chart("t", ("a", "b"), [('<x onload="1">', ((50.0, "50%"), (None, "–")))])
    assert "<x " not in chart and "&lt;x onload=&quot;1&quot;&gt;" in chart
    widths = [float(w) for w in re.findall(r'<g [^>]*><rect [^>]*width="([\d.]+)"', chart)]
    assert len(widths) == 2 and widths[0] > 0 and widths[1] == 0


# Header -------------------------------------------------------------------------------------


def test_the_endpoint_is_named_without_credentials() -> None:
    assert endpoint_label("developer", "") == "Google's Gemini Developer API endpoint"
    assert endpoint_label("vertex", "") == "Google's Vertex AI endpoint"
    assert (
        endpoint_label("developer", "http://127.0.0.1:8123/")
        == "local emulator at http://127.0.0.1:8123"
    )
    assert endpoint_label("developer", "http://localhost:9").startswith("local emulator at")
    secret = "https://user:hunter2@proxy.example.com:8443/v1?key=AIzaSECRET#frag"
    assert shown_url(secret) == "https://proxy.example.com:8443/v1"
    assert (
        endpoint_label("developer", secret)
        == "custom endpoint at https://proxy.example.com:8443/v1"
    )


def test_the_header_says_when_what_and_that_a_local_spend_was_not_billed() -> None:
    when = dt.datetime(2026, 12, 3, 15, 4, 5, tzinfo=dt.UTC)
    local = render_header(
        ReportContext(when, "gemini-3-flash-preview", "developer", "http://127.0.0.1:5/"),
        "demo<1>",
        Decimal("3.19"),
    )
    assert "2026-12-03 15:04:05 UTC" in local and "gemini-3-flash-preview" in local
    assert "Gemini Developer API" in local and "local emulator at http://127.0.0.1:5" in local
    assert "estimate" in local and "nothing was billed" in local
    assert "demo&lt;1&gt;" in local
    remote = render_header(ReportContext(when, "m", "vertex", ""), "demo", Decimal("1"))
    assert "estimate" in remote and "nothing was billed" not in remote
