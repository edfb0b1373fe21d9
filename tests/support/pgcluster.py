"""A PostgreSQL cluster of a test's own, which the test may restart (the shared server at
127.0.0.1:5432 must never be). Built with the server's own binaries (``initdb``, ``pg_ctl``);
as root they run as the ``postgres`` user, as PostgreSQL requires."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 120  # pg_ctl -w waits at most this long for the server to start or stop


def _bin_dir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    assert found, "PostgreSQL's server binaries (/usr/lib/postgresql/*/bin) are needed"
    return found[-1].parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True, slots=True)
class Cluster:
    url: str  # postgresql+asyncpg://...
    _ctl: tuple[str, ...]
    _data: Path
    _options: str
    _log: Path

    def start(self) -> None:
        self._run("start", "-o", self._options, "-l", str(self._log))

    def stop(self) -> None:
        """Stop fast: every connection is cut, new ones are refused until :meth:`start`."""
        self._run("stop", "-m", "fast")

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._ctl, "-D", str(self._data), "-w", "-t", str(START_TIMEOUT_S), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    """A new cluster on a free port (trust auth, fsync off), removed afterwards."""
    bin_dir = _bin_dir()
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    home = Path(tempfile.mkdtemp(prefix="ground-pg-"))
    data = home / "data"
    if as_postgres:
        shutil.chown(home, "postgres")
    ctl = (*as_postgres, str(bin_dir / "pg_ctl"))
    subprocess.run(
        [*as_postgres, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
         "--no-sync"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    port = _free_port()
    options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off"
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{port}/postgres"
    cluster = Cluster(url, ctl, data, options, home / "log")
    try:
        cluster.start()
        yield cluster
    finally:
        subprocess.run(
            [*ctl, "-D", str(data), "-m", "immediate", "stop"],
            check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        shutil.rmtree(home, ignore_errors=True)
