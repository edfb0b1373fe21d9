"""A ``[job] database`` URL whose host or port cannot be read is the job file's error: one
line naming the key, exit 2 from the CLI, :class:`GroundError` from the Python API, and the
adapters' no-retry failure. The password is never repeated."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli.dispatch import main
from pipeline.errors import GroundError
from pipeline.exit_codes import ExitStatus
from pipeline.job.spec import JobSpecError, load_jobspec
from tests.support.jobs import make_job

BAD_URLS = [
    ("postgresql://u:s3cret@127.0.0.1:notaport/db", "port is not a number"),
    ("postgresql://u:s3cret@[::1/db", "never closed"),
    ("postgresql://u:s3cret@[::1]x/db", "not a :port"),
    ("postgresql://u:s3cret@db.example:0/db", "port is not a number"),
    ("postgresql://u:s3cret@db.example:65536/db", "port is not a number"),
    ("postgresql://u:s3cret@a:5432,b:5433/db", "one host only"),
    ("postgresql://u:s3cret/db", "port is not a number"),  # the '@' forgotten
]


def job_file(tmp_path: Path, database: str) -> Path:
    make_job(tmp_path, base_url="http://127.0.0.1:1")
    path = tmp_path / "job.toml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"sqlite:///job.sqlite"', f'"{database}"'), encoding="utf-8")
    return path


@pytest.mark.parametrize(("url", "said"), BAD_URLS)
def test_a_bad_host_or_port_is_the_job_files_error(tmp_path: Path, url: str, said: str) -> None:
    with pytest.raises(JobSpecError) as raised:
        load_jobspec(job_file(tmp_path, url))
    message = str(raised.value)
    assert "job.database" in message and said in message
    assert "s3cret" not in message and "\n" not in message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:s3cret@127.0.0.1:5432/db",
        "postgresql://u@[::1]:5432/db",
        "postgresql://u@[::1]/db",
        "postgresql://db.example/db?ssl=require",
        "postgresql:///db?host=/var/run/postgresql",
    ],
)
def test_good_urls_pass(tmp_path: Path, url: str) -> None:
    assert load_jobspec(job_file(tmp_path, url)).database_url.startswith("postgresql+asyncpg://")


def test_the_cli_says_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = job_file(tmp_path, BAD_URLS[0][0])
    assert main(["status", str(path)]) == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "s3cret" not in err


def test_the_python_api_raises_ground_error_and_airflow_does_not_retry(tmp_path: Path) -> None:
    from pipeline.api.jobs import run_job

    path = job_file(tmp_path, BAD_URLS[1][0])
    with pytest.raises(GroundError) as raised:
        run_job(path)
    assert not (tmp_path / "job.sqlite").exists()
    pytest.importorskip("airflow.sdk", reason="needs ground[airflow]")
    from airflow.sdk.exceptions import AirflowFailException

    from pipeline.orchestrate.airflow import refused_outcome, settle

    found = refused_outcome(path, raised.value)
    assert found["exit_status"] == ExitStatus.USAGE
    with pytest.raises(AirflowFailException):
        settle(found)
