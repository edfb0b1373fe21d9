"""The review desk under hostile and careless input: cursors
past the id range, NUL and over-long text, ``next`` leading off the desk, oversized request
lines and cookies in the log, a source's domain from its destination, the PostgreSQL search
index on a huge question, and ``ground serve`` on a job never run. SQLite and PostgreSQL."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline import cli
from pipeline.clock import utcnow
from pipeline.job.states import Verdict
from pipeline.serve.inputs import MAX_CURSOR
from pipeline.store import queue
from pipeline.store.answers import persist_answers
from pipeline.store.resolution import SourceUpdate, store_resolutions
from pipeline.store.reviews import DESK_INDEX_CHARS
from pipeline.store.tables import answers, reviews, sources
from tests.support.desk import answer_record, desk_client, desk_engine, fill
from tests.support.jobs import make_job
from tests.support.metrics import free_port

pytestmark = pytest.mark.anyio
BACKENDS = ("sqlite", "postgresql")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_cursors_past_the_range_are_refused_with_400(backend: str, tmp_path: Path) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        job = await fill(engine, 6)
        async with desk_client(job) as (client, _):
            for after in ("99999999999999999999999", str(MAX_CURSOR + 1), "-1", "1e9", "x"):
                response = await client.get("/answers", params={"after": after})
                assert response.status == 400, after
                page = await response.text()
                assert 'id="refused"' in page and "after must be a whole number" in page
            last = await client.get("/answers", params={"after": str(MAX_CURSOR)})
            assert last.status == 200 and "No question matches." in await last.text()
            assert (await client.get("/answers?after=")).status == 200


@pytest.mark.parametrize("backend", BACKENDS)
async def test_nul_and_over_long_text_are_refused_and_nothing_is_stored(
    backend: str, tmp_path: Path
) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        job = await fill(engine, 6)
        async with desk_client(job) as (client, context):
            base = {"verdict": "approved", "reviewer": "ana", "csrf": context.csrf_token}
            for field, value, said in (
                ("note", "fine\x00", "note holds a NUL"),
                ("reviewer", "a\x00na", "reviewer holds a NUL"),
                ("note", "n" * 4_001, "note has 4,001 characters; at most 4,000"),
                ("reviewer", "r" * 201, "reviewer has 201 characters; at most 200"),
            ):
                response = await client.post(
                    "/answers/q0001/review", data={**base, field: value}, allow_redirects=False
                )
                assert response.status == 400, field
                assert said in await response.text()
            for query in ("q=a%00b", "domain=x%00", "class=" + "c" * 501):
                assert (await client.get("/answers?" + query)).status == 400, query
            for path in ("/answers/a%00b", "/answers/" + "x" * 513):
                assert (await client.get(path)).status == 400, path
                posted = await client.post(path + "/review", data=base, allow_redirects=False)
                assert posted.status == 400, path
            async with engine.connect() as connection:
                assert await connection.scalar(sa.select(sa.func.count()).select_from(reviews)) == 0
            whole = "n" * 4_000  # the limit itself is kept whole, not cut
            ok = await client.post(
                "/answers/q0001/review", data={**base, "note": whole}, allow_redirects=False
            )
            assert ok.status == 303
            async with engine.connect() as connection:
                assert await connection.scalar(sa.select(reviews.c.note)) == whole
            page = await (await client.get("/answers/q0001")).text()
            assert "Note (at most 4,000 characters)" in page


HOSTILE_NEXT = [
    "//evil.example/x",
    "////evil.example:8080/x",
    "/\\evil.example/x",
    "/%2F/evil.example/x",
    "/%5Cevil.example/x",
    "/%252F%252Fevil.example",
    "https://evil.example/",
    "javascript:alert(1)",
    "evil.example/x",
    "/answers/\r\nSet-Cookie: x=1",
    "/\tevil",
]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_next_is_only_a_path_on_the_desk(backend: str, tmp_path: Path) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        job = await fill(engine, 6)
        async with desk_client(job) as (client, context):
            form = {"verdict": "approved", "reviewer": "ana", "csrf": context.csrf_token}
            for target in HOSTILE_NEXT:
                response = await client.post(
                    "/answers/q0001/review", data={**form, "next": target}, allow_redirects=False
                )
                assert response.status == 400, target
                assert "next must be a path on this desk" in await response.text()
            ok = await client.post(
                "/answers/q0001/review",
                data={**form, "next": "/answers/q0002"},
                allow_redirects=False,
            )
            assert ok.status == 303 and ok.headers["Location"] == "/answers/q0002"
            page = await (await client.get("/answers/q0001")).text()
            assert 'name="next" value="/answers/q0002"' in page


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_sources_domain_comes_from_its_destination_when_the_api_sends_none(
    backend: str, tmp_path: Path
) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        job = await fill(engine, 4)
        async with engine.begin() as connection:
            # the Developer API's web chunk: no domain
            await connection.execute(
                sources.update().where(sources.c.answer_id.is_not(None)).values(domain=None)
            )
            source_id, answer_id = (
                await connection.execute(
                    sa.select(sources.c.id, sources.c.answer_id)
                    .join(answers, answers.c.id == sources.c.answer_id)
                    .where(answers.c.question_id == job.ids["q0001"])
                )
            ).one()
            await store_resolutions(
                connection,
                [
                    SourceUpdate(
                        answer_id,
                        0,
                        Verdict("resolved", destination="https://News.Example.co.uk:8443/a"),
                        302,
                        1,
                        utcnow(),
                        1.0,
                    )
                ],
            )
            stored = await connection.scalar(
                sa.select(sources.c.destination_domain).where(sources.c.id == source_id)
            )
            assert stored == "example.co.uk"
        async with desk_client(job) as (client, _):
            for domain in ("example.co.uk", "news.example.co.uk", "EXAMPLE.co.uk."):
                page = await (await client.get("/answers", params={"domain": domain})).text()
                assert re.findall(r'<tr data-qid="([^"]+)"', page) == ["q0001"], domain
            page = await (await client.get("/answers/q0001")).text()
            assert "<td>example.co.uk</td>" in page


async def test_a_question_past_the_tsvector_bound_loads_and_says_so(tmp_path: Path) -> None:
    async with desk_engine("postgresql", tmp_path) as engine:
        job = await fill(engine, 4)
        # 1.3 MB of distinct words: its tsvector, whole, is over PostgreSQL's 1 MB
        words = " ".join(f"w{i:07d}" for i in range(150_000)) + " lastword"
        async with engine.begin() as connection:
            found = await queue.insert_new_questions(
                connection, job.job_id, [queue.NewQuestion("huge", words, "geo")]
            )
            await persist_answers(
                connection,
                [answer_record(found["huge"], "Huge " + words, "example.org")],
                utcnow(),
                lambda _uri: Verdict("pending"),
            )
        async with desk_client(job) as (client, _):
            first = await (await client.get("/answers", params={"q": "w0000001"})).text()
            assert re.findall(r'<tr data-qid="([^"]+)"', first) == ["huge"]
            last = await (await client.get("/answers", params={"q": "lastword"})).text()
            assert "No question matches." in last  # past the prefix: not indexed
            page = await (await client.get("/answers/huge")).text()
            assert f"first {DESK_INDEX_CHARS:,} characters" in page
            small = await (await client.get("/answers/q0001")).text()
            assert 'id="index-note"' not in small


def test_serve_on_a_job_never_run_makes_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_job(tmp_path, base_url="http://127.0.0.1:1", n_questions=1)
    assert cli.main(["serve", str(spec.path), "--port", str(free_port())]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "has not been loaded or run yet" in line and "ground load" in line
    assert not (tmp_path / "job.sqlite").exists()


def raw_request(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_oversized_requests_are_logged_in_one_line_without_the_token(tmp_path: Path) -> None:
    spec = make_job(tmp_path, base_url="http://127.0.0.1:1", n_questions=2)
    command = [sys.executable, "-m", "pipeline.cli"]
    subprocess.run([*command, "load", str(spec.path)], check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen(
        [*command, "serve", str(spec.path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # printed once the socket listens
        token = re.search(r"token=([\w-]+)", line)[1]  # type: ignore[index]
        long_url = f"/answers?token={token}&pad=" + "x" * 20_000
        answered = raw_request(port, f"GET {long_url} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
        assert answered.split(b" ", 2)[1] == b"400"
        cookie = f"ground_desk_session={token}; pad=" + "y" * 20_000
        answered = raw_request(
            port, f"GET /answers HTTP/1.1\r\nHost: h\r\nCookie: {cookie}\r\n\r\n".encode()
        )
        assert answered.split(b" ", 2)[1] == b"400"
        # the desk still serves after both
        fine = raw_request(
            port, f"GET /?token={token} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n".encode()
        )
        assert fine.split(b" ", 2)[1] == b"303"
    finally:
        server.send_signal(signal.SIGINT)
        _, errors = server.communicate(timeout=30)
    assert token not in errors
    assert "Traceback" not in errors and "x" * 100 not in errors and "y" * 100 not in errors
    refusals = [line for line in errors.splitlines() if "refused a request" in line]
    assert len(refusals) == 2, errors
