"""``pipeline.run_job`` from several threads of one process: orchestrators run
tasks in threads. Four jobs, each its own database (SQLite files, and PostgreSQL databases),
run at once: every one finishes, none refused by another's half-made schema, and a state
directory shared by them keeps each thread's files apart."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

import pipeline
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.run.outcome import RunOutcome
from tests.support.databases import postgres_job_database
from tests.support.jobs import make_job
from tests.support.keys import TEST_API_KEY

THREADS = 4
N = 8


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningEmulator]:
    monkeypatch.setenv("GEMINI_API_KEY", TEST_API_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with running_emulator(EmulatorConfig(seed=5)) as emu:
        yield emu


def run_in_threads(jobs: list[Path], state_dir: Path) -> list[RunOutcome | BaseException]:
    results: list[RunOutcome | BaseException] = [RuntimeError("never ran")] * len(jobs)
    start = threading.Barrier(len(jobs))

    def one(i: int) -> None:
        start.wait()
        try:
            results[i] = pipeline.run_job(jobs[i], overrides=[f'job.state_dir="{state_dir}"'])
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_four_jobs_from_four_threads_all_finish(
    backend: str, tmp_path: Path, emulator: RunningEmulator
) -> None:
    jobs = []
    with ExitStack() as stack:
        for i in range(THREADS):
            directory = tmp_path / f"job{i}"
            database = (
                stack.enter_context(postgres_job_database()) if backend == "postgresql" else None
            )
            make_job(directory, base_url=emulator.base_url, n_questions=N, database=database)
            jobs.append(directory / "job.toml")
        state_dir = tmp_path / "state"
        state_dir.mkdir()
        results = run_in_threads(jobs, state_dir)
        again = pipeline.run_job(jobs[0], overrides=[f'job.state_dir="{state_dir}"'])
    for result in results:
        assert isinstance(result, RunOutcome), repr(result)
        assert result.exit_status in (0, 3), result.stopped
    # run again later: its schema whole
    assert again.exit_status in (0, 3)
