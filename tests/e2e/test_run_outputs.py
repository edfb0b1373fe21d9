"""The files and port a run writes to: one that cannot be used is refused before any call
(exit 2, one line); one that fails later is logged and counted while the run goes on; and the
metrics hold the job's state from the start, not from the first progress interval."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from tests.support.jobs import generate_calls, make_job
from tests.support.keys import TEST_API_KEY
from tests.support.metrics import free_port, read_textfile, scrape, value
from tests.support.waiting import process_exited, wait_until

GROUND = Path(sys.executable).parent / "ground"
RUN_TIMEOUT_S = 120.0
MODEL = "gemini-3.8-flash"  # make_job's
UNWRITABLE_DIR = "/sys"  # sysfs: no file can be created there, even by root


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["run", "{job}", "--metrics-textfile", "{tmp}/missing/ground.prom"], "does not exist"),
        (["run", "{job}", "--summary-json", "{tmp}"], "is a directory"),
        (["run", "{job}", "--metrics-textfile", "{job}/ground.prom"], "is not a directory"),
        (["run", "{job}", "--metrics-textfile", f"{UNWRITABLE_DIR}/g.prom"], "cannot write"),
        (["refresh", "{job}", "--older-than", "1d", "--summary-json", "{tmp}/no/s.json"], "exist"),
        (["worker", "{job}", "--metrics-textfile", "{tmp}/missing/ground.prom"], "does not exist"),
        (["export", "{job}", "--out", "{tmp}/missing/answers.jsonl"], "does not exist"),
        (["report", "{job}", "--out", "{tmp}/missing/report.html"], "does not exist"),
    ],
)
@pytest.mark.usefixtures("emulator_key")
def test_an_output_that_cannot_be_written_is_refused_before_anything_is_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], says: str
) -> None:
    with running_emulator(EmulatorConfig(seed=1)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=5)
        argv = [a.format(job=spec.path, tmp=tmp_path) for a in command]
        status = main(argv)
        calls = generate_calls(emu.stats(), MODEL)
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith(f"ground {argv[0]}: {argv[-2]} {argv[-1]}: ")
    assert says in err and "Traceback" not in err
    assert calls == 0
    assert not (tmp_path / "job.sqlite").exists()  # not even the database was opened


def _ground_run(spec_path: Path, *flags: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(GROUND), "run", str(spec_path), "--log-format", "json", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "GEMINI_API_KEY": TEST_API_KEY},
    )


def test_the_state_gauges_are_set_before_the_first_progress_interval(tmp_path: Path) -> None:
    port = free_port()
    textfile = tmp_path / "ground.prom"
    with running_emulator(EmulatorConfig(seed=2)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=40)
        emu.hold()  # no question can finish until released
        # The default interval (60 s): the first tick is far beyond this test.
        run = _ground_run(
            spec.path, "--metrics-port", str(port), "--metrics-textfile", str(textfile)
        )
        try:
            live = wait_until(
                lambda: (s := scrape(port)) and value(s, "ground_queue_depth") is not None and s,
                "the queue depth on /metrics",
                abort=process_exited(run),
            )
            # Written at the start too (the server may answer a moment before it is).
            at_start = wait_until(
                lambda: textfile.exists() and read_textfile(textfile), "the textfile at start"
            )
            wait_until(lambda: generate_calls(emu.stats(), MODEL) > 0, "a held call")
        finally:
            emu.release()
        _, stderr = run.communicate(timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, stderr.decode()[-2000:]
    # Written before the first claim: every question pending.
    assert (
        value(at_start, "ground_queue_depth")
        == value(at_start, "ground_questions", state="pending")
        == 40
    )
    # Scraped live: the gauges move with each claim, so some may be running already; none
    # can have finished (the emulator holds every call).
    pending = value(live, "ground_questions", state="pending")
    running = value(live, "ground_questions", state="running") or 0
    assert value(live, "ground_queue_depth") == pending and pending + running == 40
    for samples in (live, at_start):
        assert value(samples, "ground_quota_requests_per_minute") == 60000
        assert value(samples, "ground_last_exit_status") is None  # still running
    final = read_textfile(textfile)
    assert (
        value(final, "ground_questions", state="done")
        + value(final, "ground_questions", state="ungrounded")
        == 40
    )
    assert value(final, "ground_queue_depth") == 0
    assert value(final, "ground_last_exit_status") == 0


def test_the_state_gauges_follow_claims_and_answers_between_progress_intervals(
    tmp_path: Path,
) -> None:
    """Each claim and each stored verdict moves the gauges at once (no query), long before
    the first progress interval (an hour here) reads the job's states again."""
    port = free_port()
    with running_emulator(EmulatorConfig(seed=3, ungrounded_share=0.0)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=40)
        emu.hold()
        # 8 callers and 16 questions in hand; 10 requests a second: 40 answers take 4 s.
        run = _ground_run(
            spec.path,
            "--metrics-port",
            str(port),
            "--progress-interval",
            "3600",
            "--set",
            "limits.requests_per_minute=600",
        )
        try:
            claimed = wait_until(
                lambda: (s := scrape(port)) and value(s, "ground_questions", state="running") and s,
                "claimed questions on /metrics",
                abort=process_exited(run),
            )
            wait_until(lambda: generate_calls(emu.stats(), MODEL) > 0, "a held call")
        finally:
            emu.release()
        answered = wait_until(
            lambda: (
                (s := scrape(port)) and (value(s, "ground_questions", state="done") or 0) >= 5 and s
            ),
            "answers on /metrics",
            abort=process_exited(run),
        )
        _, stderr = run.communicate(timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, stderr.decode()[-2000:]
    running = value(claimed, "ground_questions", state="running")
    assert 0 < running <= 16
    assert value(claimed, "ground_queue_depth") == 40 - running
    done = value(answered, "ground_questions", state="done")
    assert done < 40  # seen mid-run, not from the final read
    assert (
        value(answered, "ground_queue_depth") + value(answered, "ground_questions", state="running")
        == 40 - done
    )


def test_outputs_that_fail_mid_run_are_logged_and_counted_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    port = free_port()
    (tmp_path / "prom").mkdir()
    (tmp_path / "summary").mkdir()
    textfile = tmp_path / "prom" / "ground.prom"
    with running_emulator(EmulatorConfig(seed=3)) as emu:
        spec = make_job(tmp_path / "job", base_url=emu.base_url, n_questions=20)
        emu.hold()
        run = _ground_run(
            spec.path,
            "--progress-interval",
            "0.1",
            "--metrics-port",
            str(port),
            "--metrics-textfile",
            str(textfile),
            "--summary-json",
            str(tmp_path / "summary" / "summary.json"),
        )
        try:
            wait_until(textfile.exists, "the textfile at start", abort=process_exited(run))
            shutil.rmtree(tmp_path / "prom")  # as a cleanup job or a full disk would
            shutil.rmtree(tmp_path / "summary")
            wait_until(
                lambda: (
                    (s := scrape(port))
                    and (
                        value(s, "ground_output_write_failures_total", output="metrics_textfile")
                        or 0
                    )
                    >= 2
                ),
                "two failed textfile writes counted",
                abort=process_exited(run),
            )
        finally:
            emu.release()
        _, stderr = run.communicate(timeout=RUN_TIMEOUT_S)
    log = stderr.decode()
    assert run.returncode == 0, log[-2000:]
    assert "Traceback" not in log
    records = [orjson.loads(line) for line in log.splitlines()]  # every line is a JSON record
    failed = [r for r in records if r["action"] == "output_write_failed"]
    assert {r["output"] for r in failed} == {"metrics_textfile", "summary_json"}
    assert all("No such file or directory" in r["message"] for r in failed)
