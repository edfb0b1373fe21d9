"""Redirect resolution: the rules, the HTTP walk (never to the destination), and in a run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from aiohttp import web

from pipeline.commands.maintain import resolve_command
from pipeline.commands.results import status_command
from pipeline.commands.run import run_command
from pipeline.emulator.clock import FakeClock, ProcessTimeClock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.sections import ResolverSection
from pipeline.job.states import SourceState
from pipeline.limits.backoff import Backoff
from pipeline.links import rules as redirects
from pipeline.links.resolver import RedirectClient, resolver_policy
from pipeline.links.rules import AllowList, check_destination, initial_verdict
from pipeline.store.engine import create_engine
from pipeline.store.tables import sources
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio


# -- the rules (pure) ---------------------------------------------------------------------------


def test_allow_list_matches_host_and_port() -> None:
    allow = AllowList(["vertexaisearch.cloud.google.com", "127.0.0.1:8080"])
    assert allow.allows("https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbC")
    assert not allow.allows("https://vertexaisearch.cloud.google.com:8443/x")
    assert not allow.allows("https://evil.example/vertexaisearch.cloud.google.com")
    assert not allow.allows("https://vertexaisearch.cloud.google.com.evil.example/x")
    assert allow.allows("http://127.0.0.1:8080/grounding-api-redirect/x")
    assert not allow.allows("http://127.0.0.1:8081/grounding-api-redirect/x")
    assert not allow.allows("ftp://vertexaisearch.cloud.google.com/x")
    assert not allow.allows("https://user@vertexaisearch.cloud.google.com:bad/x")


@pytest.mark.parametrize(
    ("uri", "status"),
    [
        ("https://vertexaisearch.cloud.google.com/grounding-api-redirect/x", SourceState.PENDING),
        ("https://berkshirehathaway.com", SourceState.DIRECT),
        ("https://maps.google.com/?cid=123", SourceState.DIRECT),
        ("gs://bucket/docs/a.pdf", SourceState.DIRECT),
        (None, SourceState.NO_URI),
        ("", SourceState.NO_URI),
        ("javascript:alert(1)", SourceState.REJECTED),
        ("http://169.254.169.254/latest/meta-data", SourceState.REJECTED),
        ("https://user:pw@example.com/", SourceState.REJECTED),
    ],
)
def test_initial_verdicts(uri: str | None, status: str) -> None:
    allow = AllowList(["vertexaisearch.cloud.google.com"])
    verdict = initial_verdict(uri, allow)
    assert verdict.status == status
    if status == SourceState.REJECTED:  # kept as given, less any user:password@
        assert verdict.destination == (uri or "").replace("user:pw@", "") and verdict.reason


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "javascript:alert(document.cookie)",
        "http://169.254.169.254/",
        "http://127.0.0.1:9/",
        "http://[::1]/",
        "http://localhost/x",
        "https://user@example.com/",
        "https://example.com/" + "a" * redirects.MAX_URL_CHARS,
        "https:///nohost",
    ],
)
def test_unacceptable_destinations(url: str) -> None:
    assert check_destination(url) is not None


def test_acceptable_destination() -> None:
    assert check_destination("https://www.bbc.co.uk/sport/rugby-union/12345?x=1#a") is None


# -- the walk over HTTP -------------------------------------------------------------------------


class Listener:
    """A TCP listener that only counts connections: a destination that must never be called."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Listener:
        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.close()

        self._server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


def _status(code: int) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=code)

    return handler


@asynccontextmanager
async def redirect_server(
    locations: dict[str, str], peers: set[object] | None = None
) -> AsyncIterator[str]:
    """An allow-listed redirect host (yields its host:port): /r/NAME answers 302 to
    locations[NAME] (the dict may be filled in after start); /big/NAME too, with a 1 MB body;
    /head405/NAME refuses HEAD; /gone is 404; /forbidden is 403; /error is 503; /plain is 200.
    ``peers`` collects the client address of every request (one per connection)."""

    async def redirect(request: web.Request) -> web.Response:
        if peers is not None and request.transport is not None:
            peers.add(request.transport.get_extra_info("peername"))
        return web.Response(status=302, headers={"Location": locations[request.match_info["name"]]})

    async def big(request: web.Request) -> web.Response:
        location = locations[request.match_info["name"]]
        return web.Response(status=302, headers={"Location": location}, body=b"x" * 1_000_000)

    async def head405(request: web.Request) -> web.Response:
        if request.method == "HEAD":
            return web.Response(status=405)
        return web.Response(status=302, headers={"Location": locations[request.match_info["name"]]})

    app = web.Application()
    app.router.add_route("*", "/r/{name}", redirect)
    app.router.add_route("*", "/head405/{name}", head405)
    app.router.add_route("*", "/big/{name}", big)
    for path, code in (("/gone", 404), ("/forbidden", 403), ("/error", 503), ("/plain", 200)):
        app.router.add_route("*", path, _status(code))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _settings(host: str) -> ResolverSection:
    return ResolverSection(
        allow_hosts=(host,), concurrency=8, requests_per_second=1000.0, timeout_s=2.0
    )


async def test_hostile_locations_are_stored_as_given_and_never_contacted() -> None:
    async with Listener() as listener:
        hostile = {
            "metadata": "http://169.254.169.254/latest/meta-data/",
            "local": f"http://127.0.0.1:{listener.port}/admin",
            "file": "file:///etc/passwd",
            "js": "javascript:alert(1)",
        }
        async with redirect_server(hostile) as host:
            allow = AllowList([host])
            async with RedirectClient(_settings(host), allow) as client:
                for name, location in hostile.items():
                    outcome = await client.resolve(f"http://{host}/r/{name}")
                    assert outcome.verdict.status == SourceState.REJECTED, name
                    assert outcome.verdict.destination == location
                    assert outcome.verdict.reason
                # A source on a host that is not allow-listed is never requested at all.
                outcome = await client.resolve(f"http://127.0.0.1:{listener.port}/x")
                assert outcome.verdict.status == SourceState.REJECTED
        assert listener.connections == 0


async def test_walk_outcomes() -> None:
    locations: dict[str, str] = {}
    async with redirect_server(locations) as host:
        locations.update(
            {
                "ok": "https://www.example.org/article?id=1",
                "relative": "/r/ok",  # on the allow-listed host: followed
                "hop1": f"http://{host}/r/hop2",
                "hop2": f"http://{host}/r/hop3",
                "hop3": f"http://{host}/r/hop4",
                "hop4": "https://www.example.org/deep",
                "get": "https://www.example.org/after-get",
            }
        )
        allow = AllowList([host])
        fast = resolver_policy(Backoff(base_s=0.01, cap_s=0.01))
        async with RedirectClient(_settings(host), allow, policy=fast) as client:
            ok = await client.resolve(f"http://{host}/r/ok")
            assert (ok.verdict.status, ok.verdict.destination) == (
                SourceState.RESOLVED,
                "https://www.example.org/article?id=1",
            )
            assert ok.http_status == 302
            relative = await client.resolve(f"http://{host}/r/relative")
            assert relative.verdict.destination == "https://www.example.org/article?id=1"
            too_deep = await client.resolve(f"http://{host}/r/hop1")
            assert too_deep.verdict.status == SourceState.FAILED
            via_get = await client.resolve(f"http://{host}/head405/get")
            assert via_get.verdict.destination == "https://www.example.org/after-get"
            assert (await client.resolve(f"http://{host}/gone")).verdict.status == "expired"
            assert (await client.resolve(f"http://{host}/forbidden")).verdict.status == "forbidden"
            assert (await client.resolve(f"http://{host}/plain")).verdict.status == "failed"
            error = await client.resolve(f"http://{host}/error")
            assert (error.verdict.status, error.http_status) == ("failed", 503)


async def test_lookups_reuse_one_connection_and_leave_a_large_body_unread() -> None:
    locations = {"ok": "https://www.example.org/a"}
    peers: set[object] = set()
    async with redirect_server(locations, peers) as host:
        settings = ResolverSection(
            allow_hosts=(host,), concurrency=1, requests_per_second=1000.0, timeout_s=2.0
        )
        async with RedirectClient(settings, AllowList([host])) as client:
            for _ in range(20):
                outcome = await client.resolve(f"http://{host}/r/ok")
                assert outcome.verdict.destination == "https://www.example.org/a"
            assert len(peers) == 1  # 20 lookups, one connection
            big = await client.resolve(f"http://{host}/big/ok")
            assert big.verdict.destination == "https://www.example.org/a"
            await client.resolve(f"http://{host}/r/ok")
    assert len(peers) == 2  # the 1 MB body was not read: its connection was dropped


# -- in a run -----------------------------------------------------------------------------------


async def _statuses(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(
                sa.select(sources.c.resolve_status, sa.func.count()).group_by(
                    sources.c.resolve_status
                )
            )
            return dict(rows.all())
    finally:
        await engine.dispose()


@pytest.mark.usefixtures("emulator_key")
async def test_every_redirect_resolves_before_a_5s_ttl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = EmulatorConfig(seed=21, redirect_ttl_s=5.0, latency_p50_ms=50, latency_p99_ms=400)
    # The run and the emulator share this process: the links age with its CPU time, so the
    # TTL is as tight beside stress-ng (where the run takes ~18 s of wall time) as when idle.
    with running_emulator(config, clock=ProcessTimeClock()) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=200,
            overrides=["limits.concurrency=32", "resolver.requests_per_second=200.0"],
        )
        assert await run_command(spec) == 0
        redirect_hits = emu.stats()["redirects"]["by_outcome"]
    statuses = await _statuses(spec.database_url)
    assert statuses.get(SourceState.RESOLVED, 0) > 300
    assert set(statuses) <= {SourceState.RESOLVED, SourceState.NO_URI}
    assert redirect_hits.get("expired", 0) == 0
    capsys.readouterr()
    assert await status_command(spec, as_json=False) == 0
    assert "resolved" in capsys.readouterr().out


@pytest.mark.usefixtures("emulator_key")
async def test_resolving_after_the_ttl_finds_every_redirect_expired(tmp_path: Path) -> None:
    clock = FakeClock()  # the links age only when the test says so
    with running_emulator(EmulatorConfig(seed=22, redirect_ttl_s=1.0), clock=clock) as emu:
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=30, overrides=["resolver.enabled=false"]
        )
        assert await run_command(spec) == 0
        pending = await _statuses(spec.database_url)
        assert pending.get(SourceState.PENDING, 0) > 30
        clock.advance(1.5)
        assert await resolve_command(spec) == 0
    statuses = await _statuses(spec.database_url)
    assert statuses.get(SourceState.EXPIRED) == pending[SourceState.PENDING]
    assert set(statuses) <= {SourceState.EXPIRED, SourceState.NO_URI}


@pytest.mark.usefixtures("emulator_key")
async def test_a_run_with_nothing_to_ask_still_resolves_what_was_left(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=23)) as emu:
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=10, overrides=["resolver.enabled=false"]
        )
        assert await run_command(spec) == 0
        assert (await _statuses(spec.database_url)).get(SourceState.PENDING, 0) > 10
        calls = emu.stats()["requests"]["by_kind"]["developer"]
        again = make_job(tmp_path, base_url=emu.base_url, n_questions=10)
        assert await run_command(again) == 0
        assert emu.stats()["requests"]["by_kind"]["developer"] == calls  # nothing re-asked
    assert set(await _statuses(spec.database_url)) <= {SourceState.RESOLVED, SourceState.NO_URI}
