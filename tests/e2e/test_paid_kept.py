"""Paid means stored, or kept: a full disk and a database file removed mid-run.

Each run is a child process against the emulator. The emulator's count of answered calls is
compared with what the database's ledger holds plus what the run kept in its spill file
(pipeline.run.spill); the rerun must store the kept outcomes without calling for them again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline import cli
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec
from pipeline.run.context import job_spill_prefix
from pipeline.run.spill import read_spilled
from pipeline.store.tables import calls, questions
from tests.support.databases import fetch_rows
from tests.support.jobs import generate_calls, make_job
from tests.support.pgcluster import private_cluster
from tests.support.readonly import read_only
from tests.support.waiting import process_exited, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]

TMPFS_SIZE = "16m"  # room for every answer once the filler is gone
ROOM_LEFT = 640 * 1024  # bytes left free once the questions are loaded: some answers fit
N_QUESTIONS = 400


@contextmanager
def small_tmpfs(directory: Path, size: str = TMPFS_SIZE) -> Iterator[Path]:
    """A small tmpfs mounted on ``directory`` (skipped, saying why, where it cannot be)."""
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here: {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def fill(directory: Path, leave: int) -> Path:
    """A file taking all but ``leave`` bytes of ``directory``'s file system."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    filler = directory / "filler"
    with filler.open("wb") as handle:
        handle.write(b"\0" * max(0, free - leave))
    return filler


def ground(spec_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args, str(spec_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


async def ground_calls_by_qid(url: str) -> list[str]:
    """The input ids of the questions of every ground call in the ledger."""
    rows = await fetch_rows(
        url,
        sa.select(questions.c.qid)
        .select_from(calls.join(questions, calls.c.question_id == questions.c.id))
        .where(calls.c.step == "ground"),
    )
    return [r.qid for r in rows]


def spill_files(spec: JobSpec) -> list[Path]:
    """The job's spill files, whichever process wrote them."""
    prefix = job_spill_prefix(spec)
    return sorted(prefix.parent.glob(f"{prefix.name}.*.spill.jsonl"))


def kept_ground_calls(spec: JobSpec) -> list[str]:
    return [
        k.qid
        for path in spill_files(spec)
        for k in read_spilled(path)
        for c in k.calls
        if c.step == "ground"
    ]


async def test_a_full_disk_keeps_the_paid_answers_and_the_rerun_pays_only_for_the_rest(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "db") as db_dir, running_emulator(EmulatorConfig(seed=5)) as emu:
        database = f"sqlite:///{db_dir / 'job.sqlite'}"
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, database=database)
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        loaded = ground(spec.path, env, "load")
        assert loaded.returncode == 0, loaded.stderr
        filler = fill(db_dir, ROOM_LEFT)

        first = ground(spec.path, env, "run")
        answered = generate_calls(emu.stats())
        assert first.returncode == 1, first.stderr
        assert "Traceback" not in first.stderr
        assert "the database's disk is full (database or disk is full)" in first.stderr
        (spill,) = spill_files(spec)
        assert str(spill) in first.stderr  # the line names where the paid answers are
        assert 0 < answered < N_QUESTIONS  # the disk filled mid-run
        stored = await ground_calls_by_qid(spec.database_url)
        kept = kept_ground_calls(spec)
        assert stored, "nothing fitted: the test did not see a disk filling up"
        assert kept, "the full disk left nothing to keep: the test did not test it"
        # Every answered call is in the ledger or in the spill file: none paid and lost.
        assert answered == len(stored) + len(kept)

        filler.unlink()
        copy = spill.read_bytes()
        second = ground(spec.path, env, "run")
        assert second.returncode == 0, second.stderr
        assert f"stored {len(kept)} outcomes of paid calls" in second.stdout
        rerun_calls = generate_calls(emu.stats()) - answered
        # Only the questions never answered are asked: nothing kept is paid for twice.
        assert rerun_calls == N_QUESTIONS - len(set(stored) | set(kept))
        assert not spill.exists()
        final = await ground_calls_by_qid(spec.database_url)
        assert len(final) == generate_calls(emu.stats())
        assert sorted(set(final)) == sorted({f"q{i:05d}" for i in range(N_QUESTIONS)})

        # The same file again (as if its acknowledgement had been lost): nothing twice.
        spill.write_bytes(copy)
        third = ground(spec.path, env, "run")
        assert third.returncode == 0, third.stderr
        assert "stored 0 outcomes of paid calls" in third.stdout
        assert sorted(await ground_calls_by_qid(spec.database_url)) == sorted(final)


async def test_a_database_file_removed_mid_run_stops_it_with_exit_1(tmp_path: Path) -> None:
    config = EmulatorConfig(seed=9, latency_p50_ms=100, latency_p99_ms=300)
    with running_emulator(config) as emu:
        overrides = ["limits.requests_per_minute=3000", "limits.concurrency=8"]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=200, overrides=overrides)
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in overrides for arg in ("--set", override)]
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(
                lambda: generate_calls(emu.stats()) >= 20,
                "20 answered calls",
                abort=process_exited(child),
            )
            for suffix in ("", "-wal", "-shm"):
                Path(f"{tmp_path / 'job.sqlite'}{suffix}").unlink(missing_ok=True)
            _out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        answered = generate_calls(emu.stats())
    assert child.returncode == 1, err.decode()
    stderr = err.decode()
    assert "Traceback" not in stderr
    # "was removed during the run", or "was removed and replaced by another" when one of the
    # run's own new connections opened the path first (SQLite creates a missing file).
    assert f"the database file {tmp_path / 'job.sqlite'} was removed" in stderr
    assert answered < 200  # stopped, not carried on into the unlinked file
    kept = kept_ground_calls(spec)
    assert kept

    # The rerun opens a new database at the path: it stores what was kept, without calling
    # for it, and asks the rest (what went into the removed file is lost with it).
    with running_emulator(config) as emu:
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=200, overrides=overrides)
        again = ground(spec.path, env, "run")
        assert again.returncode == 0, again.stderr
        assert generate_calls(emu.stats()) == 200 - len(set(kept))
    assert sorted(await ground_calls_by_qid(spec.database_url)) == sorted(
        {f"q{i:05d}" for i in range(200)}
    )


async def test_a_read_only_database_file_is_named_not_waited_out(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=3)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=20)
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        loaded = ground(spec.path, env, "load")
        assert loaded.returncode == 0, loaded.stderr
        with read_only(tmp_path / "job.sqlite"):
            started = time.monotonic()
            done = ground(spec.path, env, "run", "--set", "job.database_outage_s=300")
            took = time.monotonic() - started
        answered = generate_calls(emu.stats())
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "the database is read-only (attempt to write a readonly database)" in done.stderr
    assert took < 60  # named at once, not waited out for database_outage_s
    stored = await ground_calls_by_qid(spec.database_url)
    kept = kept_ground_calls(spec)
    assert answered == len(stored) + len(kept)


@pytest.mark.postgres
async def test_the_first_sigterm_ends_a_run_waiting_out_a_lost_database_at_once(
    tmp_path: Path,
) -> None:
    """The server stopped mid-run, ``database_outage_s`` 300: a SIGTERM ends the run within
    seconds, the paid answers it could not store kept; the rerun stores them, calling only for
    the questions never answered."""
    n = 300
    overrides = ["limits.requests_per_minute=1500", "job.database_outage_s=300"]
    config = EmulatorConfig(seed=148, ungrounded_share=0.0, latency_p50_ms=200)
    with private_cluster() as cluster, running_emulator(config) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=n,
            database=cluster.url.replace("+asyncpg", ""),
            overrides=overrides,
        )
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in overrides for arg in ("--set", override)]
        log = tmp_path / "run.log"
        with log.open("wb") as stderr:
            child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=stderr)
        try:
            wait_until(
                lambda: generate_calls(emu.stats()) >= 40,
                "40 answered calls",
                abort=process_exited(child),
            )
            cluster.stop()
            wait_until(
                lambda: "database connection lost" in log.read_text(),
                "the run noticing the outage",
                abort=process_exited(child),
            )
            child.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            child.communicate(timeout=120)
            took = time.monotonic() - signalled
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        answered = generate_calls(emu.stats())
        stderr_text = log.read_text()
        assert child.returncode == 1, stderr_text
        assert took < 30, f"the SIGTERM took {took:.0f} s"  # not database_outage_s
        assert 0 < answered < n
        assert "Traceback" not in stderr_text
        closing = stderr_text.strip().splitlines()[-1]
        assert closing.startswith("ground: run stopped early: SIGTERM received"), closing
        assert "kept in" in closing, closing

        cluster.start()
        again = ground(spec.path, env, "run")
        assert again.returncode == 0, again.stderr
        assert "stored " in again.stdout and "outcomes of paid calls" in again.stdout
        stored = await ground_calls_by_qid(cluster.url)
        assert len(stored) == generate_calls(emu.stats())  # every paid call stored once
        # The rerun called only for the questions never answered: one call per question.
        assert generate_calls(emu.stats()) == n
        assert sorted(set(stored)) == sorted({f"q{i:05d}" for i in range(n)})


def test_a_load_that_fills_the_disk_says_so_in_one_line(tmp_path: Path) -> None:
    # Room for the migrated schema (about 200 KB, more while migrating), not for the questions.
    with small_tmpfs(tmp_path / "db", "640k") as db_dir:
        spec = make_job(
            tmp_path,
            base_url="http://127.0.0.1:9",
            n_questions=10_000,
            database=f"sqlite:///{db_dir / 'job.sqlite'}",
        )
        loaded = ground(spec.path, dict(os.environ), "load")
    assert loaded.returncode == 1
    assert loaded.stderr.splitlines() == [
        "ground: the database's disk is full (database or disk is full), while loading"
        " questions.jsonl: the chunks committed before are kept; load again once the"
        " database can be written"
    ]


@pytest.mark.usefixtures("emulator_key")  # with a key, the state directory is what is refused
def test_a_state_directory_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=3)
    (tmp_path / "taken").write_text("a file, not a directory")
    status = cli.main(["run", str(spec.path), "--set", 'job.state_dir="taken/ground"'])
    assert status == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"ground: [job] state_dir {tmp_path / 'taken' / 'ground'}: cannot write there (Not a"
        " directory); paid responses the database cannot take are kept there: set"
        " [job] state_dir"
    ]
    assert not (tmp_path / "job.sqlite").exists()  # refused before anything was opened
