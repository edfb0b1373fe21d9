"""What a run cannot honour is refused before it starts, in one line and within seconds: a
metrics port already taken, a summary file in a missing directory, limits no call could work
under. Nothing is loaded or called."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from pipeline import cli
from tests.support.jobs import make_job

REFUSED_WITHIN_S = 10.0  # seconds: a refusal is immediate; this only bounds a busy machine


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def job(tmp_path: Path) -> Path:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=3)
    return tmp_path / "job.toml"


def test_a_metrics_port_in_use_is_one_line_and_exit_1(
    job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["run", str(job), "--metrics-port", str(port)]) == 1
    line = one_line(capsys.readouterr().err)
    assert line == (
        f"ground run: --metrics-port {port}: port {port} on 127.0.0.1 is already in use"
        " (another run or server holds it)"
    )
    assert not (job.parent / "job.sqlite").exists()  # refused before the run began


def test_a_metrics_host_that_is_no_address_is_one_line(
    job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", str(job), "--metrics-port", "9", "--metrics-host", "192.0.2.1"]) == 1
    assert "192.0.2.1 is not an address of this machine" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("flag", ["--summary-json", "--metrics-textfile"])
def test_an_output_file_in_a_missing_directory_is_a_usage_error(
    job: Path, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = job.parent / "no-such-dir" / "out.json"
    assert cli.main(["run", str(job), flag, str(target)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line == f"ground run: {flag} {target}: the directory {target.parent} does not exist"
    assert not (job.parent / "job.sqlite").exists()


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("limits.tokens_per_minute=1", "limits.tokens_per_minute: 1 is below the smallest call"),
        ("limits.concurrency=1000000", "limits.concurrency: 1000000 is more than this key"),
        ("limits.concurrency=1e23", "limits.concurrency: Expected `int`, got `float`"),
        ("limits.budget_usd=inf", "limits.budget_usd: inf is not a finite number"),
        ("limits.budget_usd=1e23", "limits.budget_usd: 1e+23 is more than this key takes"),
    ],
)
def test_impossible_limits_exit_2_in_one_line_within_seconds(
    job: Path, override: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert cli.main(["run", str(job), "--set", override]) == 2
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert says in one_line(capsys.readouterr().err)
    assert not (job.parent / "job.sqlite").exists()
