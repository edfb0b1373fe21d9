"""The exit status contract (pipeline.exit_codes, README "Exit status"): one test per status,
through the ``ground`` command line as cron or CI would run it."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import pytest

from pipeline import cli
from pipeline.cli import dispatch
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.exit_codes import ExitStatus
from tests.support.jobs import make_job

pytestmark = pytest.mark.usefixtures("emulator_key")


def _run(job: Path, *extra: str) -> int:
    return cli.main(["run", str(job), *extra])


def test_0_every_question_finished_and_none_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=1)) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=8)
        summary = tmp_path / "summary.json"
        assert _run(tmp_path / "job.toml", "--summary-json", str(summary)) == ExitStatus.OK == 0
    assert "failure state" not in capsys.readouterr().err
    document = orjson.loads(summary.read_bytes())
    assert document["exit_status"] == 0 and document["outcome"] == "ok"
    assert document["failures"] == {} and document["run"]["calls"] == 8
    assert document["status"]["terminal"] == 8


def test_3_finished_but_some_failed_names_the_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every answer blocked, and blocked a failure state (an unknown model is no longer a
    # failure of each question: its 404 stops the run, exit 2, test_model_lifecycle).
    strict = ("--set", 'job.fail_on=["failed", "blocked"]')
    with running_emulator(EmulatorConfig(seed=2, block_share=1.0)) as emu:
        make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=6,
            overrides=[],
        )
        summary = tmp_path / "summary.json"
        status = _run(
            tmp_path / "job.toml",
            *strict,
            "--summary-json",
            str(summary),
        )
    assert status == ExitStatus.SOME_FAILED == 3
    err = capsys.readouterr().err
    assert "ground: questions in a failure state: blocked 6" in err
    assert "exit status 3" in err
    document = orjson.loads(summary.read_bytes())
    assert document["exit_status"] == 3 and document["failures"] == {"blocked": 6}

    # The next run has nothing to do, and still tells the truth about the job.
    with running_emulator(EmulatorConfig(seed=2, block_share=1.0)) as emu:
        status = _run(tmp_path / "job.toml", *strict)
    assert status == 3


def test_fail_on_is_the_operators_choice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=8, block_share=1.0)) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=4)
        assert _run(tmp_path / "job.toml") == 0  # blocked is not a failure by default
        strict = _run(tmp_path / "job.toml", "--set", 'job.fail_on=["failed", "blocked"]')
    assert strict == 3
    assert "blocked 4" in capsys.readouterr().err


def test_1_stopped_early(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    make_job(tmp_path, base_url=f"http://127.0.0.1:{port}", n_questions=3)
    assert _run(tmp_path / "job.toml") == ExitStatus.FAILED == 1
    assert "ground: run stopped early:" in capsys.readouterr().err


def test_2_bad_job_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=1)
    status = _run(tmp_path / "job.toml", "--set", 'job.fail_on=["failed", "done"]')
    assert status == ExitStatus.USAGE == 2
    err = capsys.readouterr().err
    assert "job.fail_on: 'done' is not a failure state" in err
    assert "Traceback" not in err


def test_130_interrupted_during_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(dispatch, "load_jobspec", interrupted)
    assert _run(tmp_path / "job.toml") == ExitStatus.INTERRUPTED == 130
    assert capsys.readouterr().err == "ground: interrupted\n"


def test_help_states_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["run", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        out = capsys.readouterr().out
        assert "exit status:" in out
        for code in ("0 ", "1 ", "2 ", "3 ", "130 "):
            assert f"\n  {code}" in out
