"""``ground report``: the page's structure, and the page itself in headless Chromium."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from pipeline.cli import main
from pipeline.job.spec import JobSpec
from pipeline.results.report.page import CSP, SCRIPT, script_hash
from tests.support.keys import TEST_API_KEY
from tests.support.paths import REPO
from tests.support.results import XSS_ID, run_results_job

ARTIFACTS = REPO / "var" / "test-artifacts"
N_QUESTIONS = 24
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobSpec, Path]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMINI_API_KEY", TEST_API_KEY)
        patch.delenv("GOOGLE_API_KEY", raising=False)
        directory = tmp_path_factory.mktemp("report")
        spec = anyio.run(run_results_job, directory, N_QUESTIONS)
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
    assert page.count('<tr data-state="') == N_QUESTIONS
    assert "The table holds the first 24 of 24 questions" in page
    for figure in ("Questions by state", "Source resolution", "Answer latency", "by class"):
        assert figure in page
    assert "&lt;script&gt;document.title" in page  # the planted answer, escaped


def test_report_limit_bounds_the_table(report: tuple[JobSpec, Path], tmp_path: Path) -> None:
    spec, _ = report
    out = tmp_path / "small.html"
    assert main(["report", str(spec.path), "--out", str(out), "--limit", "5"]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.count('<tr data-state="') == 5
    assert "The table holds the first 5 of 24 questions" in page


@pytest.fixture
def chromium() -> Iterator[webdriver.Chrome]:
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, "the browser test needs Debian's chromium and chromium-driver"
    with tempfile.TemporaryDirectory(prefix="ground-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        browser = webdriver.Chrome(options=options, service=Service(executable_path=driver))
        try:
            yield browser
        finally:
            browser.quit()


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
