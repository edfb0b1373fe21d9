"""A hostile Google's links: redirects to internal addresses in any spelling are stored
``rejected`` as their canonical forms are, never contacted; and a link written with
``user:password@`` is resolved without sending the credentials, and stored without them."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.corpus import SOURCES
from pipeline.emulator.redirects import PATH_PREFIX
from pipeline.emulator.testing import running_emulator
from pipeline.job.states import SourceState
from pipeline.store.tables import sources
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.jobs import make_job

PASSWORD = "s3cret-pw"  # the password a hostile link carries
USERINFO = f"grounder:{PASSWORD}"


class CountingListener(socketserver.ThreadingTCPServer):
    """A port on this machine that counts connections: where a hostile link points, and
    which must never be called."""

    daemon_threads = True
    connections = 0

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), socketserver.BaseRequestHandler)

    def process_request(self, request: object, client_address: object) -> None:
        self.connections += 1
        self.shutdown_request(request)  # type: ignore[arg-type]


@pytest.fixture
def listener() -> Iterator[CountingListener]:
    with CountingListener() as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server
        finally:
            server.shutdown()
            thread.join()


def spellings(port: int) -> list[str]:
    """Loopback, link-local and private destinations, none written the way a rule on the
    canonical text would catch."""
    return [
        f"http://2130706433:{port}/decimal",
        f"http://0x7f.1:{port}/hex-short",
        f"http://127.1:{port}/short",
        f"http://0177.0.0.1:{port}/octal",
        f"http://127\u30020\u30020\u30021:{port}/ideographic-dots",
        f"http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11:{port}/fullwidth",
        f"http://localhost.:{port}/trailing-dot",
        f"http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:{port}/fullwidth-name",
        f"http://[::ffff:127.0.0.1]:{port}/v4-mapped",
        "http://0xa9fea9fe/latest/meta-data/",
        "http://169.254.43518/latest/meta-data/",
        "http://10.0.0.0x1/",
    ]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "sqlite":
        yield "sqlite:///job.sqlite"
        return
    with postgres_job_database() as url:
        yield url


def _web_sources(url: str) -> list[sa.Row]:
    s = sources.c
    return anyio.run(
        fetch_rows,
        url,
        sa.select(s.uri, s.destination, s.resolve_status, s.resolve_error).where(
            s.uri.contains(PATH_PREFIX)
        ),
    )


@pytest.mark.usefixtures("emulator_key")
def test_redirects_to_internal_addresses_in_any_spelling_are_rejected_and_never_contacted(
    tmp_path: Path, database: str, listener: CountingListener
) -> None:
    hostile = spellings(listener.server_address[1])
    config = EmulatorConfig(
        seed=31, redirect_locations=frozenset(hostile), redirect_userinfo=USERINFO
    )
    with running_emulator(config) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=30, database=database)
        assert anyio.run(run_command, spec) == 0
        redirects = emu.stats()["redirects"]
    rows = _web_sources(spec.database_url)
    assert len(rows) > 30
    for row in rows:
        assert row.resolve_status == SourceState.REJECTED, row
        assert row.destination in hostile, row  # kept as the redirect gave it
        assert row.resolve_error.startswith("points at a private"), row
    assert {row.destination for row in rows} == set(hostile)  # every spelling was met
    assert redirects["by_outcome"]["302"] >= len(rows)  # each link was asked about ...
    assert redirects["with_authorization"] == 0  # ... never with the link's credentials
    assert listener.connections == 0  # and no destination was called
    assert not [row for row in rows if PASSWORD in f"{row.uri}{row.destination}"]


@pytest.mark.usefixtures("emulator_key")
def test_a_link_with_user_information_is_resolved_without_sending_it(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=32, redirect_userinfo=USERINFO)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10)
        assert anyio.run(run_command, spec) == 0
        redirects = emu.stats()["redirects"]
    assert redirects["with_authorization"] == 0  # aiohttp sends a URL's userinfo as Basic
    rows = _web_sources(spec.database_url)
    publishers = {source.url for source in SOURCES}
    assert len(rows) > 10
    for row in rows:
        assert row.resolve_status == SourceState.RESOLVED, row
        assert row.destination in publishers, row
        assert row.uri.startswith(emu.base_url + PATH_PREFIX), row  # stored without it
    assert redirects["by_outcome"]["302"] >= len(rows)
