"""The review desk in headless Chromium (Debian's packages, as the report's test): a hostile
answer runs nothing under the desk's policy, the desk's own script runs (the overview polls,
the keyboard decides), and a screenshot of each page is kept in var/test-artifacts/."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from anyio.from_thread import start_blocking_portal
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.store.tables import questions, reviews
from tests.support.browser import headless_chromium
from tests.support.desk import HOSTILE_ID, desk_engine, desk_job, fill
from tests.support.metrics import free_port
from tests.support.paths import REPO

ARTIFACTS = REPO / "var" / "test-artifacts"
N_QUESTIONS = 60  # a third of them in each class, every one answered but one
KEYS = "aar" * 6 + "ea"  # 20 decisions: 13 approved, 6 rejected, 1 needs edit


@dataclass(frozen=True, slots=True)
class Desk:
    """``ground serve`` on a filled job: the link it printed (its session token in it), the
    desk's address, the job file, and what the job's database holds of ``ana``'s reviews."""

    link: str
    base: str
    job_file: Path
    reviews: Callable[[], dict[str, str]]  # qid -> verdict


async def _reviews_by(engine: AsyncEngine, reviewer: str) -> dict[str, str]:
    r, q = reviews.c, questions.c
    async with engine.connect() as connection:
        rows = await connection.execute(
            sa.select(q.qid, r.verdict)
            .join(questions, q.id == r.question_id)
            .where(r.reviewer == reviewer)
        )
        return {qid: verdict for qid, verdict in rows}


@contextmanager
def served_desk(backend: str, directory: Path) -> Iterator[Desk]:
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(desk_engine(backend, directory)) as engine,
    ):
        portal.call(fill, engine, N_QUESTIONS)
        job_file = desk_job(directory, engine).path
        port = free_port()
        command = [sys.executable, "-m", "pipeline.cli", "serve", str(job_file)]
        server = subprocess.Popen(
            [*command, "--port", str(port)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            assert line.startswith("review desk for job desk: ")
            link = line.split(": ", 1)[1].strip()
            yield Desk(
                link,
                f"http://127.0.0.1:{port}",
                job_file,
                lambda: portal.call(_reviews_by, engine, "ana"),
            )
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    with served_desk("sqlite", tmp_path) as served:
        yield served


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_desk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Desk]:
    with served_desk(request.param, tmp_path) as served:
        yield served


@pytest.fixture
def chromium() -> Iterator[webdriver.Chrome]:
    with headless_chromium() as browser:
        yield browser


def test_desk_in_headless_chromium(desk: Desk, chromium: webdriver.Chrome) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    wait = WebDriverWait(chromium, 15)
    link, base = desk.link, desk.base

    chromium.get(base + "/")  # no session yet
    assert "needs the link" in chromium.find_element(By.TAG_NAME, "body").text
    refused = chromium.get_log("browser")  # read, so that only later entries are checked
    assert refused and all("401 (Unauthorized)" in e["message"] for e in refused)
    chromium.get(link)  # the session opens, and the token leaves the address
    assert chromium.current_url == base + "/"
    # desk.js ran (allowed by the policy) and read /overview.json
    wait.until(lambda d: d.find_element(By.ID, "polled").text.startswith("live, read"))
    assert chromium.find_element(By.CSS_SELECTOR, '[data-field="answers"]').text == "59"
    chromium.save_screenshot(str(ARTIFACTS / "desk-overview.png"))

    chromium.get(base + "/answers?class=geo")
    rows = chromium.find_elements(By.CSS_SELECTOR, "#answers tbody tr[data-qid]")
    assert len(rows) == 20
    body = chromium.find_element(By.TAG_NAME, "body")
    body.send_keys("j")
    body.send_keys("j")
    assert "current" in (rows[1].get_attribute("class") or "")
    chromium.save_screenshot(str(ARTIFACTS / "desk-answers.png"))

    chromium.get(f"{base}/answers/{HOSTILE_ID}")
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
    chromium.get(f"{base}/answers/{HOSTILE_ID}")
    assert chromium.find_element(By.ID, "review-status").text == "approved"
    chromium.save_screenshot(str(ARTIFACTS / "desk-answer-reviewed.png"))

    chromium.get(f"{base}/answers/q0002")
    assert chromium.find_element(By.ID, "versions").is_displayed()
    chromium.save_screenshot(str(ARTIFACTS / "desk-versions.png"))
    severe = [e for e in chromium.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def test_twenty_answers_reviewed_by_keyboard_from_a_filtered_search(
    any_desk: Desk, chromium: webdriver.Chrome, tmp_path: Path
) -> None:
    """The list filtered to one class and searched for a word, then 20 decisions made with
    the keyboard alone: each stored, and ``export --review approved`` gives exactly those.
    On SQLite and PostgreSQL."""
    wait = WebDriverWait(chromium, 15)
    base = any_desk.base
    chromium.get(any_desk.link)
    chromium.get(base + "/answers")
    chromium.find_element(By.NAME, "class").send_keys("geo")
    search = chromium.find_element(By.NAME, "q")
    search.send_keys("peak")
    search.submit()
    wait.until(lambda d: "class=geo" in d.current_url and "q=peak" in d.current_url)
    rows = chromium.find_elements(By.CSS_SELECTOR, "#answers tbody tr[data-qid]")
    qids = [row.get_attribute("data-qid") for row in rows]
    assert len(qids) == 20 and all(int(q[1:]) % 3 == 0 for q in qids)  # geo only

    chromium.find_element(By.NAME, "reviewer").send_keys("ana")
    chromium.find_element(By.TAG_NAME, "h1").click()  # out of the name field
    body = chromium.find_element(By.TAG_NAME, "body")
    body.send_keys("j")  # the first row marked
    for key in KEYS:
        body.send_keys(key)  # decides the marked row, and marks the next
    verdicts = {"a": "approved", "r": "rejected", "e": "needs_edit"}
    wanted = {qid: verdicts[key] for qid, key in zip(qids, KEYS, strict=True)}
    wait.until(
        lambda d: (
            [c.text for c in d.find_elements(By.CSS_SELECTOR, "#answers td.review")]
            == list(wanted.values())
        )
    )
    chromium.save_screenshot(str(ARTIFACTS / "desk-list-reviewed.png"))

    stored = any_desk.reviews()
    assert stored == wanted

    out = tmp_path / "approved.jsonl"
    export = [sys.executable, "-m", "pipeline.cli", "export", str(any_desk.job_file)]
    subprocess.run([*export, "--review", "approved", "--out", str(out)], check=True)
    exported = {json.loads(line)["id"] for line in out.read_text(encoding="utf-8").splitlines()}
    assert exported == {qid for qid, verdict in wanted.items() if verdict == "approved"}


@contextmanager
def other_origin() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on another port of the same host: the origin a hostile ``next`` aims
    at (cookies are scoped by host, not port). Yields its port and the requests it got."""
    import http.server
    import threading

    seen: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(f"{self.path} cookie={self.headers.get('Cookie')}")
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_hostile_next_never_leaves_the_desk(desk: Desk, chromium: webdriver.Chrome) -> None:
    """The review form's ``next`` rewritten to forms a browser follows to another origin:
    the desk refuses each with a page of its own, and the other origin gets no request."""
    wait = WebDriverWait(chromium, 15)
    chromium.get(desk.link)
    with other_origin() as (port, seen):
        for target in (
            f"////127.0.0.1:{port}/stolen",
            f"/\\127.0.0.1:{port}/stolen",
            f"/%2F127.0.0.1:{port}/stolen",
            f"http://127.0.0.1:{port}/stolen",
        ):
            chromium.get(f"{desk.base}/answers/q0001")
            chromium.find_element(By.NAME, "reviewer").send_keys("eve")
            box = chromium.find_element(By.NAME, "next")
            chromium.execute_script("arguments[0].value = arguments[1]", box, target)
            chromium.find_element(By.CSS_SELECTOR, 'button[value="approved"]').click()
            wait.until(lambda d: d.find_elements(By.ID, "refused"))
            assert chromium.current_url.startswith(desk.base + "/"), target
            assert (
                "next must be a path on this desk" in chromium.find_element(By.ID, "refused").text
            )
        assert seen == []
