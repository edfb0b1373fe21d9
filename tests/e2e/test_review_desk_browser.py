"""The review desk in headless Chromium (Debian's packages, as the report's test): a hostile
answer runs nothing under the desk's policy, the desk's own script runs (the overview polls,
the keyboard decides), and a screenshot of each page is kept in var/test-artifacts/."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import headless_chromium
from tests.support.desk import HOSTILE_ID, desk_engine, fill
from tests.support.metrics import free_port
from tests.support.paths import REPO

ARTIFACTS = REPO / "var" / "test-artifacts"


async def _filled(directory: Path) -> None:
    async with desk_engine("sqlite", directory) as engine:
        await fill(engine, 30)


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[str]:
    """``ground serve`` on a filled job; the link it printed (its session token in it)."""
    anyio.run(_filled, tmp_path)
    (tmp_path / "questions.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "job.toml").write_text(
        '[job]\nname = "desk"\ndatabase = "sqlite:///test.sqlite"\n'
        '[source]\nfile = "questions.jsonl"\n'
        '[model]\nname = "gemini-2.5-flash"\nbase_url = "http://127.0.0.1:1"\n',
        encoding="utf-8",
    )
    port = free_port()
    command = [sys.executable, "-m", "pipeline.cli", "serve", str(tmp_path / "job.toml")]
    server = subprocess.Popen(
        [*command, "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("review desk for job desk: ")
        yield line.split(": ", 1)[1].strip()  # the link, with the session token
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)


@pytest.fixture
def chromium() -> Iterator[webdriver.Chrome]:
    with headless_chromium() as browser:
        yield browser


def test_desk_in_headless_chromium(desk: str, chromium: webdriver.Chrome) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    wait = WebDriverWait(chromium, 15)
    link, desk = desk, desk.split("/?", 1)[0]

    chromium.get(desk + "/")  # no session yet
    assert "needs the link" in chromium.find_element(By.TAG_NAME, "body").text
    refused = chromium.get_log("browser")  # read, so that only later entries are checked
    assert refused and all("401 (Unauthorized)" in e["message"] for e in refused)
    chromium.get(link)  # the session opens, and the token leaves the address
    assert chromium.current_url == desk + "/"
    # desk.js ran (allowed by the policy) and read /overview.json
    wait.until(lambda d: d.find_element(By.ID, "polled").text.startswith("live, read"))
    assert chromium.find_element(By.CSS_SELECTOR, '[data-field="answers"]').text == "29"
    chromium.save_screenshot(str(ARTIFACTS / "desk-overview.png"))

    chromium.get(desk + "/answers?class=geo")
    rows = chromium.find_elements(By.CSS_SELECTOR, "#answers tbody tr[data-qid]")
    assert len(rows) == 10
    body = chromium.find_element(By.TAG_NAME, "body")
    body.send_keys("j")
    body.send_keys("j")
    assert "current" in (rows[1].get_attribute("class") or "")
    chromium.save_screenshot(str(ARTIFACTS / "desk-answers.png"))

    chromium.get(f"{desk}/answers/{HOSTILE_ID}")
    assert chromium.title.startswith(HOSTILE_ID)  # the answer's script did not set it
    assert "<script>" in chromium.find_element(By.CSS_SELECTOR, "#answer .answer").text
    # a marker's hover text: title, then the resolved destination (desk.js)
    marker = chromium.find_element(By.CSS_SELECTOR, "#answer sup.cite a")
    assert marker.get_attribute("title").endswith("\nhttps://example.org/page")
    chromium.save_screenshot(str(ARTIFACTS / "desk-answer-hostile.png"))

    # decide by keyboard: the reviewer's name typed once, then `a` approves
    chromium.find_element(By.NAME, "reviewer").send_keys("ana")
    chromium.find_element(By.NAME, "note").send_keys("checked")
    chromium.find_element(By.TAG_NAME, "h1").click()
    chromium.find_element(By.TAG_NAME, "body").send_keys("a")
    wait.until(lambda d: d.current_url.endswith("/answers/q0007"))  # then the next answer
    chromium.get(f"{desk}/answers/{HOSTILE_ID}")
    assert chromium.find_element(By.ID, "review-status").text == "approved"
    chromium.save_screenshot(str(ARTIFACTS / "desk-answer-reviewed.png"))

    chromium.get(f"{desk}/answers/q0002")
    assert chromium.find_element(By.ID, "versions").is_displayed()
    chromium.save_screenshot(str(ARTIFACTS / "desk-versions.png"))
    severe = [e for e in chromium.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
