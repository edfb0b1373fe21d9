"""``ground report``: the page's structure, its table's selection (first N, a seeded sample,
of a class and states), and the page itself in headless Chromium: the header, the problems and
their examples' anchors, and the per-class chart against its table."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from selenium import webdriver
from selenium.webdriver.common.by import By

from pipeline.cli import main
from pipeline.job.spec import JobSpec
from pipeline.results.report.page import CSP, SCRIPT, script_hash
from pipeline.results.report.selection import pick_sample
from pipeline.results.report.svg import CHART_WIDTH, LABEL_WIDTH
from pipeline.store.engine import create_engine
from pipeline.store.tables import answers, questions, sources
from tests.support.browser import headless_chromium
from tests.support.keys import TEST_API_KEY
from tests.support.paths import REPO
from tests.support.results import CLASSES, XSS_ID, run_results_job

ARTIFACTS = REPO / "var" / "test-artifacts"
N_QUESTIONS = 24
IDS = [f"q{i:05d}" for i in range(N_QUESTIONS)]
FAILED_ID = "q00010"  # planted: a dead letter
REJECTED_ID = "q00020"  # planted: its answer's first source rejected by the resolver
ROW = re.compile(r'<tr id="q-([^"]+)"( class="example")? data-state="([^"]+)"')


async def _plant_problems(spec: JobSpec) -> None:
    """A failed question and a rejected link, so that the problems section has examples, one
    of them past the first rows."""
    engine = create_engine(spec.database_url)
    q, a, s = questions.c, answers.c, sources.c
    try:
        async with engine.begin() as connection:
            await connection.execute(
                questions.update()
                .where(q.qid == FAILED_ID)
                .values(state="failed", last_error="planted: <b>boom</b>")
            )
            answer = sa.select(a.id).join(questions, q.id == a.question_id)
            answer = answer.where(q.qid == REJECTED_ID).scalar_subquery()
            await connection.execute(
                sources.update()
                .where(s.answer_id == answer, s.chunk_index == 0)
                .values(resolve_status="rejected", resolve_error="planted")
            )
    finally:
        await engine.dispose()


def _rows(page: str) -> list[tuple[str, bool, str]]:
    """The table's rows: (question id, a problem example from outside the selection, state)."""
    return [(qid, bool(example), state) for qid, example, state in ROW.findall(page)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobSpec, Path]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMINI_API_KEY", TEST_API_KEY)
        patch.delenv("GOOGLE_API_KEY", raising=False)
        directory = tmp_path_factory.mktemp("report")
        spec = anyio.run(run_results_job, directory, N_QUESTIONS)
        anyio.run(_plant_problems, spec)
    out = directory / "report.html"
    assert main(["report", str(spec.path), "--out", str(out)]) == 0
    return spec, out


def test_report_is_self_contained_with_one_allowed_script(report: tuple[JobSpec, Path]) -> None:
    _, out = report
    page = out.read_text(encoding="utf-8")
    assert page.count("<script") == 1 and f"<script>{SCRIPT}</script>" in page
    assert f"'{script_hash()}'" in CSP and CSP in page
    # Nothing is fetched: no external script, style sheet, image, font or frame source.
    assert not re.search(r"""<(script|link|img|iframe)[^>]*\s(src|href)=["']?https?:""", page)
    assert "@import" not in page and "url(http" not in page
    assert [qid for qid, _, _ in _rows(page)] == IDS
    assert "The table holds the first 24 of 24 questions" in page
    for figure in ("Questions by state", "Source resolution", "Answer latency", "by class"):
        assert figure in page
    assert "&lt;script&gt;document.title" in page  # the planted answer, escaped


def test_report_limit_bounds_the_table(report: tuple[JobSpec, Path], tmp_path: Path) -> None:
    spec, _ = report
    out = tmp_path / "small.html"
    assert main(["report", str(spec.path), "--out", str(out), "--limit", "5"]) == 0
    page = out.read_text(encoding="utf-8")
    rows = _rows(page)
    assert [qid for qid, example, _ in rows if not example] == IDS[:5]
    assert "The table holds the first 5 of 24 questions" in page
    # The problems' examples past the first 5 are added, marked, so every link has its row.
    linked = set(re.findall(r'href="#q-([^"]+)"', page))
    assert {FAILED_ID, REJECTED_ID} <= linked
    assert {qid for qid, example, _ in rows if example} == {q for q in linked if q not in IDS[:5]}


def test_report_sample_is_seeded_and_filtered(report: tuple[JobSpec, Path], tmp_path: Path) -> None:
    spec, _ = report

    def table(name: str, *flags: str) -> list[tuple[str, bool, str]]:
        out = tmp_path / name
        assert main(["report", str(spec.path), "--out", str(out), *flags]) == 0
        return _rows(out.read_text(encoding="utf-8"))

    sample = table("a.html", "--sample", "6", "--seed", "4")
    chosen = [qid for qid, example, _ in sample if not example]
    assert set(chosen) == pick_sample(IDS, 6, seed=4) and len(chosen) == 6
    assert chosen == sorted(chosen)  # shown in load order
    assert table("b.html", "--sample", "6", "--seed", "4") == sample
    assert {q for q, e, _ in table("c.html", "--sample", "6", "--seed", "5") if not e} != set(
        chosen
    )
    geo = [qid for i, qid in enumerate(IDS) if CLASSES[i % len(CLASSES)] == "geo"]
    done = table("d.html", "--class", "geo", "--state", "done", "--sample", "3", "--seed", "1")
    picked = [(qid, state) for qid, example, state in done if not example]
    assert len(picked) == 3 and all(qid in geo and state == "done" for qid, state in picked)
    both = ["report", str(spec.path), "--out", str(tmp_path / "x.html")]
    with pytest.raises(SystemExit) as refused:
        main([*both, "--limit", "3", "--sample", "3"])
    assert refused.value.code == 2


@pytest.fixture
def chromium() -> Iterator[webdriver.Chrome]:
    with headless_chromium() as browser:
        yield browser


def test_report_in_headless_chromium(
    report: tuple[JobSpec, Path], chromium: webdriver.Chrome
) -> None:
    _, out = report
    chromium.get(out.as_uri())
    title = chromium.title
    assert title == "ground report: test"

    rows = chromium.find_elements(By.CSS_SELECTOR, "#answers tbody tr")
    assert len(rows) == N_QUESTIONS
    assert chromium.find_element(By.ID, "shown").text == str(N_QUESTIONS)  # the script ran

    # The search entry point's HTML is shown, verbatim, inside its sandboxed frame.
    frames = chromium.find_elements(By.CSS_SELECTOR, "iframe.search-entry-point")
    assert frames
    # Sandboxed: no script, no origin; only a chip's link may open a new tab.
    assert all(
        f.get_attribute("sandbox") == "allow-popups allow-popups-to-escape-sandbox" for f in frames
    )
    chromium.switch_to.frame(frames[0])
    chips = chromium.find_elements(By.CSS_SELECTOR, ".chip")
    assert chips and chips[0].text.strip()
    chromium.switch_to.default_content()

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    chromium.save_screenshot(str(ARTIFACTS / "report.png"))

    # Search filters the table; the state filter too.
    search = chromium.find_element(By.ID, "search")
    search.send_keys("q00007")
    visible = [r for r in rows if r.is_displayed()]
    assert len(visible) == 1 and "q00007" in visible[0].text
    assert chromium.find_element(By.ID, "shown").text == "1"
    search.clear()
    search.send_keys("kraków")
    assert 0 < sum(r.is_displayed() for r in rows) < N_QUESTIONS
    chromium.save_screenshot(str(ARTIFACTS / "report-search.png"))

    # The planted <script> and onerror= payloads ran nothing.
    assert chromium.execute_script("return window.pwned === undefined") is True
    assert chromium.title == title
    planted = chromium.find_element(By.XPATH, f"//tr[td[1][text()='{XSS_ID}']]")
    assert "<script>document.title" in planted.get_attribute("textContent")  # shown as text

    errors = [e for e in chromium.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def test_report_header_problems_chart_and_anchors_in_chromium(
    report: tuple[JobSpec, Path], chromium: webdriver.Chrome
) -> None:
    _, out = report
    chromium.get(out.as_uri())

    # The header: when, which model, backend and endpoint (the emulator, in words), the caveat.
    def fact(name: str) -> str:
        return chromium.find_element(By.CSS_SELECTOR, f'dd[data-fact="{name}"]').text

    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", fact("generated"))
    assert fact("model") == "gemini-3.8-flash"
    assert fact("backend") == "Gemini Developer API"
    assert re.fullmatch(r"local emulator at http://127\.0\.0\.1:\d+", fact("endpoint"))
    caveat = chromium.find_element(By.CSS_SELECTOR, "#about .caveat").text
    assert "estimate" in caveat and "nothing was billed" in caveat
    assert TEST_API_KEY not in chromium.page_source

    # The problems: a row per kind; each example's link lands on its row in the table.
    problems = chromium.find_elements(By.CSS_SELECTOR, "#problems tr[data-problem]")
    kinds = [p.get_attribute("data-problem") for p in problems]
    assert kinds == ["failed", "blocked", "ungrounded", "invalid", "unresolved_links"]
    examples: dict[str, str] = {}
    for problem in problems:
        count = int(problem.find_element(By.CSS_SELECTOR, "td.count").text.split()[0])
        links = problem.find_elements(By.CSS_SELECTOR, "a[href^='#q-']")
        assert len(links) == (1 if count else 0)
        if links:
            examples[str(problem.get_attribute("data-problem"))] = str(links[0].text)
    assert examples["failed"] == FAILED_ID and examples["unresolved_links"] == REJECTED_ID
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    chromium.save_screenshot(str(ARTIFACTS / "report-header-problems.png"))
    for kind, qid in examples.items():
        chromium.find_element(By.CSS_SELECTOR, f"#problems tr[data-problem='{kind}'] a").click()
        target = chromium.execute_script("return document.querySelector(':target')")
        assert target is not None and target.get_attribute("id") == f"q-{qid}"
        assert target.find_element(By.CSS_SELECTOR, "td").text == qid
        if kind != "unresolved_links":
            assert target.get_attribute("data-state") == kind

    # The chart says, per class, what the table beside it says.
    table = chromium.find_elements(By.CSS_SELECTOR, "#routes table.routes tbody tr")
    assert {r.get_attribute("data-class") for r in table} == set(CLASSES)
    span = CHART_WIDTH - LABEL_WIDTH - 70
    for row in table:
        qclass = row.get_attribute("data-class")
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        for series, shown in (("managed", cells[3]), ("own retrieval", cells[5])):
            bar = chromium.find_element(
                By.CSS_SELECTOR, f'#class-chart g[data-group="{qclass}"][data-series="{series}"]'
            )
            assert bar.find_element(By.CSS_SELECTOR, "text.value").text == shown
            width = float(bar.find_element(By.TAG_NAME, "rect").get_attribute("width") or "")
            expected = 0.0 if shown == "–" else float(shown.rstrip("%")) / 100 * span
            assert width == pytest.approx(expected, abs=0.06)
    assert any(c.text != "–" for c in chromium.find_elements(By.CSS_SELECTOR, "text.value"))

    # An anchor per answer, and a link to one lands on it.
    for row in chromium.find_elements(By.CSS_SELECTOR, "#answers tbody tr"):
        qid = row.find_element(By.CSS_SELECTOR, "td").text
        assert row.get_attribute("id") == f"q-{qid}"
    chromium.get(out.as_uri() + "#q-q00007")
    assert chromium.execute_script("return document.querySelector(':target').id") == "q-q00007"
    chromium.save_screenshot(str(ARTIFACTS / "report-anchor.png"))
    assert [e for e in chromium.get_log("browser") if e["level"] == "SEVERE"] == []
