"""The review desk (``ground serve``) on SQLite and PostgreSQL: the answers list's filters,
keyset pages and full-text search, one answer drawn escaped, reviews with a CSRF token and
their audit trail, ``export --review``, and the overview's live figures."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa

from pipeline import cli
from pipeline.clock import utcnow
from pipeline.commands.results import ExportOptions, export_command
from pipeline.job.spec import load_jobspec
from pipeline.job.states import Verdict
from pipeline.serve.security import CSP
from pipeline.store.answers import persist_answers
from pipeline.store.reviews import qids_with_status, record_review
from pipeline.store.tables import questions, reviews
from tests.support.desk import (
    HOSTILE_ID,
    REVISED_ID,
    UNANSWERED_ID,
    answer_record,
    desk_client,
    desk_engine,
    fill,
)
from tests.support.jobs import make_job
from tests.support.metrics import free_port

pytestmark = pytest.mark.anyio
BACKENDS = ("sqlite", "postgresql")
ROW_ID = re.compile(r'<tr data-qid="([^"]+)"')


def listed(page: str) -> list[str]:
    return ROW_ID.findall(page)


def listening_addresses(port: int) -> set[str]:
    """The IPv4 and IPv6 addresses (as the kernel writes them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


@pytest.mark.parametrize("backend", BACKENDS)
async def test_list_filters_pages_and_search(backend: str, tmp_path: Path) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        job = await fill(engine, 130)
        async with desk_client(job) as (client, _):
            first = await (await client.get("/answers")).text()
            assert listed(first)[:3] == ["q0000", "q0001", "q0002"]
            assert len(listed(first)) == 50

            # keyset pages: each page starts after the last id of the one before, none lost
            async def walk(url: str | None) -> list[str]:
                seen: list[str] = []
                while url is not None:
                    page = await (await client.get(url)).text()
                    seen += listed(page)
                    found = re.search(r'id="next-page" href="([^"]+)"', page)
                    url = found.group(1).replace("&amp;", "&") if found else None
                return seen

            assert await walk("/answers") == [f"q{i:04d}" for i in range(130)]
            # a word in every question, page after page, in the same order
            assert await walk("/answers?q=peak") == [f"q{i:04d}" for i in range(130)]

            geo = listed(await (await client.get("/answers?class=geo")).text())
            assert geo and all(int(q[1:]) % 3 == 0 for q in geo)
            done = listed(await (await client.get("/answers?state=pending")).text())
            assert done == [UNANSWERED_ID]
            ungrounded = listed(await (await client.get("/answers?grounded=no")).text())
            assert ungrounded and all(job.ids[q] % 4 == 0 for q in ungrounded)
            own = listed(await (await client.get("/answers?route=own")).text())
            assert own == []
            net = listed(await (await client.get("/answers?domain=example.net")).text())
            assert net == [REVISED_ID]  # the latest version's source only
            contradicted = listed(await (await client.get("/answers?verdict=contradicted")).text())
            assert contradicted == ["q0001"]
            # full text: a word of the answer, a word of the question, both at once
            assert listed(await (await client.get("/answers?q=Bananaq0042")).text()) == ["q0042"]
            word3 = listed(await (await client.get("/answers?q=word3&class=geo")).text())
            assert word3 and all(int(q[1:]) % 7 == 3 and int(q[1:]) % 3 == 0 for q in word3)
            # the revised answer is searched by its latest text only
            assert listed(await (await client.get("/answers?q=8%2C848")).text()) == [REVISED_ID]
            # query syntax is plain words: quotes and operators find nothing odd, break nothing
            odd = await client.get("/answers?q=%22%29+OR+*+NEAR%28")
            assert odd.status == 200


@pytest.mark.parametrize("backend", BACKENDS)
async def test_review_needs_csrf_keeps_history_and_filters(backend: str, tmp_path: Path) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        job = await fill(engine, 12)
        async with desk_client(job) as (client, context):
            form = {"verdict": "approved", "reviewer": "ana", "note": "fine"}
            refused = await client.post("/answers/q0001/review", data=form)
            assert refused.status == 403
            wrong = await client.post("/answers/q0001/review", data={**form, "csrf": "x" * 43})
            assert wrong.status == 403
            ok = await client.post(
                "/answers/q0001/review",
                data={**form, "csrf": context.csrf_token},
                allow_redirects=False,
            )
            assert ok.status == 303
            assert ok.headers["Location"] == "/answers/q0001"
            token = context.csrf_token
            for qid, verdict in (
                ("q0001", "rejected"),
                ("q0004", "approved"),
                (REVISED_ID, "needs_edit"),
            ):
                data = {"verdict": verdict, "reviewer": "bo", "csrf": token}
                assert (await client.post(f"/answers/{qid}/review", data=data)).status == 200
            async with engine.connect() as connection:
                kept = (await connection.execute(sa.select(reviews.c.verdict))).all()
                assert len(kept) == 4  # every decision kept, none overwritten
                assert await qids_with_status(connection, job.job_id, ["approved"]) == {"q0004"}
                assert await qids_with_status(connection, job.job_id, ["rejected"]) == {"q0001"}
            approved = listed(await (await client.get("/answers?review=approved")).text())
            assert approved == ["q0004"]
            pending = listed(await (await client.get("/answers?review=pending")).text())
            assert "q0001" not in pending and "q0000" in pending
            assert UNANSWERED_ID not in pending  # nothing to review without an answer
            page = await (await client.get("/answers/q0001")).text()
            assert 'id="review-status">rejected<' in page
            assert page.count("<td>ana</td>") == 1 and "fine" in page

            # a newer answer version makes the question pending again, history kept
            async with engine.begin() as connection:
                newer = answer_record(job.ids["q0004"], "Peak q0004 is taller.", "example.org", 2)
                await persist_answers(connection, [newer], utcnow(), lambda _u: Verdict("pending"))
            async with engine.connect() as connection:
                assert await qids_with_status(connection, job.job_id, ["approved"]) == frozenset()
            page = await (await client.get("/answers/q0004")).text()
            assert 'id="review-status">pending<' in page and "<td>bo</td>" in page


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_hostile_answer_is_escaped_under_a_strict_policy(
    backend: str, tmp_path: Path
) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        job = await fill(engine, 8)
        async with desk_client(job) as (client, _):
            for url in ("/", "/answers", f"/answers/{HOSTILE_ID}", "/answers?q=pwned"):
                response = await client.get(url)
                assert response.status == 200
                assert response.headers["Content-Security-Policy"] == CSP
                page = await response.text()
                assert "<script>document" not in page
                assert "<img src=x" not in page
                assert 'href="javascript:' not in page
                assert "</iframe> end" not in page
                # the only script element is the desk's own file
                assert re.findall(r"<script[^>]*>", page) == [
                    '<script src="/static/desk.js" defer>'
                ]
            page = await (await client.get(f"/answers/{HOSTILE_ID}")).text()
            assert "&lt;script&gt;document.title=" in page
            # Search suggestions verbatim, inside a sandboxed srcdoc iframe only
            assert 'sandbox="allow-popups allow-popups-to-escape-sandbox"' in page
            assert "&lt;style&gt;.chip{color:red}&lt;/style&gt;" in page
            assert "<b>title</b>" not in page and "&lt;b&gt;title&lt;/b&gt;" in page
            assert "'unsafe-inline'" not in CSP.split("script-src")[1].split(";")[0]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_answer_page_shows_citations_sources_versions(backend: str, tmp_path: Path) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        job = await fill(engine, 8)
        async with desk_client(job) as (client, _):
            page = await (await client.get("/answers/q0001")).text()
            assert '<sup class="cite"><a href="https://example.com/page"' in page
            assert 'class="unsupported"' in page and 'id="legend"' in page
            assert "contradicted" in page and "&lt;b&gt;8,000 m&lt;/b&gt;" in page
            assert 'id="raw"' in page
            revised = await (await client.get(f"/answers/{REVISED_ID}")).text()
            assert 'id="versions"' in revised and "<ins>" in revised and "<del>" in revised
            assert (await client.get("/answers/nope")).status == 404
            css = await client.get("/static/desk.css")
            assert css.status == 200 and ".unsupported" in await css.text()
            js = await client.get("/static/desk.js")
            assert js.status == 200


async def test_overview_figures_follow_the_database(tmp_path: Path) -> None:
    async with desk_engine("sqlite", tmp_path) as engine:
        job = await fill(engine, 10)
        async with desk_client(job) as (client, _):
            page = await (await client.get("/")).text()
            assert 'data-field="answers"' in page and "estimate" in page
            before = await (await client.get("/overview.json")).json()
            assert before["answers"] == 9 and before["states"]["pending"] == 1
            async with engine.begin() as connection:
                await connection.execute(
                    questions.update()
                    .where(questions.c.qid == UNANSWERED_ID)
                    .values(state="failed", last_error="boom <b>", error_class="server")
                )
            after = await (await client.get("/overview.json")).json()
            assert after["states"]["pending"] == 0 and after["states"]["failed"] == 1
            assert after["reviews"]["pending"] == 9
            page = await (await client.get("/")).text()
            assert "boom &lt;b&gt;" in page


def test_ground_serve_binds_loopback_and_serves_the_job(tmp_path: Path) -> None:
    """The command itself: `ground serve` on a loaded job, on 127.0.0.1 unless told."""
    spec = make_job(tmp_path, base_url="http://127.0.0.1:1", n_questions=5)
    cli = [sys.executable, "-m", "pipeline.cli"]
    subprocess.run([*cli, "load", str(spec.path)], check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen(
        [*cli, "serve", str(spec.path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # printed once the socket listens
        base = f"http://127.0.0.1:{port}"
        link = re.fullmatch(rf"review desk for job test: ({base}/\?token=([\w-]{{43}}))\n", line)
        assert link is not None
        token = link[2]
        # Without the session's token: 401, pages and forms alike.
        assert requests.get(f"{base}/answers", timeout=10).status_code == 401
        wrong = requests.get(f"{base}/answers", params={"token": "x" * 43}, timeout=10)
        assert wrong.status_code == 401
        bare = requests.post(f"{base}/answers/q00000/review", data={"verdict": "approved"})
        assert bare.status_code == 401
        # The printed link opens a session: a cookie, and the token leaves the address.
        session = requests.Session()
        opened = session.get(link[1], timeout=10)
        assert opened.status_code == 200 and opened.url == f"{base}/"
        assert [r.status_code for r in opened.history] == [303]
        cookie = opened.history[0].headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        listing = session.get(f"{base}/answers", timeout=10)
        assert listing.status_code == 200 and 'data-qid="q00000"' in listing.text
        refused = session.post(
            f"{base}/answers/q00000/review",
            data={"verdict": "approved", "reviewer": "x"},
            timeout=10,
        )
        assert refused.status_code == 403  # in a session, but without the CSRF token
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only
    finally:
        server.send_signal(signal.SIGINT)
        _, errors = server.communicate(timeout=30)
    assert token not in errors  # nor in any log line


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_ground_serve_beyond_loopback_refuses_to_start_without_a_chosen_token(
    tmp_path: Path,
    host: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In process: the refusal comes before the server starts (the child-process start is
    # covered by the token tests beside this one).
    spec = make_job(tmp_path, base_url="http://127.0.0.1:1", n_questions=1)
    assert cli.main(["load", str(spec.path)]) == 0
    capsys.readouterr()
    monkeypatch.delenv("GROUND_DESK_TOKEN", raising=False)
    serve = ["serve", str(spec.path), "--host", host, "--port", str(free_port())]
    assert cli.main(serve) == 2
    refused = capsys.readouterr()
    assert refused.out == ""
    (line,) = refused.err.splitlines()
    assert f"--host {host}" in line and "GROUND_DESK_TOKEN" in line
    monkeypatch.setenv("GROUND_DESK_TOKEN", "short")
    assert cli.main(serve) == 2
    assert "at least 32" in capsys.readouterr().err


def test_ground_serve_takes_the_token_the_user_chose(tmp_path: Path) -> None:
    spec = make_job(tmp_path, base_url="http://127.0.0.1:1", n_questions=1)
    cli = [sys.executable, "-m", "pipeline.cli"]
    subprocess.run([*cli, "load", str(spec.path)], check=True, capture_output=True)
    port = free_port()
    chosen = "a-token-the-team-shares-0123456789abcdef"
    server = subprocess.Popen(
        [*cli, "serve", str(spec.path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"GROUND_DESK_TOKEN": chosen},
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.endswith(f"/?token={chosen}\n")
        base = f"http://127.0.0.1:{port}"
        assert requests.get(f"{base}/", params={"token": chosen}, timeout=10).status_code == 200
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_export_gives_only_the_reviewed_answers(backend: str, tmp_path: Path) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        job = await fill(engine, 12)
        decisions = {"q0001": "approved", "q0004": "approved", "q0006": "rejected"}
        async with engine.begin() as connection:
            for qid, verdict in decisions.items():
                await record_review(
                    connection,
                    job.ids[qid],
                    verdict=verdict,
                    reviewer="ana",
                    note=None,
                    now=utcnow(),
                )
            # a later decision on the same version wins: q0006 is approved in the end
            await record_review(
                connection,
                job.ids["q0006"],
                verdict="approved",
                reviewer="bo",
                note=None,
                now=utcnow(),
            )
        url = engine.url.render_as_string(hide_password=False).replace("+aiosqlite", "")
        (tmp_path / "questions.jsonl").write_text("", encoding="utf-8")
        (tmp_path / "job.toml").write_text(
            f'[job]\nname = "desk"\ndatabase = "{url.replace("+asyncpg", "")}"\n'
            '[source]\nfile = "questions.jsonl"\n',
            encoding="utf-8",
        )
        spec = load_jobspec(tmp_path / "job.toml")
        for review, expected in (
            (("approved",), ["q0001", "q0004", "q0006"]),
            (("rejected",), []),
            (("approved", "needs_edit"), ["q0001", "q0004", "q0006"]),
        ):
            out = tmp_path / "out.jsonl"
            options = ExportOptions(out=str(out), review=review)
            assert await export_command(spec, options) == 0
            lines = out.read_text(encoding="utf-8").splitlines()
            assert [json.loads(line)["id"] for line in lines] == expected
        pending = ExportOptions(out=str(out), review=("pending",), states=("done",))
        assert await export_command(spec, pending) == 0
        exported = {json.loads(line)["id"] for line in out.read_text().splitlines()}
        assert exported == set(job.ids) - {*decisions, UNANSWERED_ID}
