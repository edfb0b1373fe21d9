"""The demo with its own-retrieval fallback switched off by one override runs: the fallback's
other keys are ignored with one note each, never refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.exit_codes import ExitStatus
from tests.support.demo import DEMO_JOB, demo_overrides

pytestmark = pytest.mark.usefixtures("emulator_key")


def test_the_demo_runs_with_its_fallback_switched_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_emulator(EmulatorConfig(seed=7)) as emu:
        argv = ["run", str(DEMO_JOB), "--set", 'grounding.fallback=""']
        for line in demo_overrides(tmp_path, emu.base_url, 6):
            argv += ["--set", line]
        status = cli.main(argv)
    assert status in (ExitStatus.OK, ExitStatus.SOME_FAILED)
    notes = [r.getMessage() for r in caplog.records if r.name == "pipeline.job.spec"]
    for key in ("grounding.fallback_when", "grounding.fallback_below"):
        assert sum(f"{key}: ignored: only used with" in note for note in notes) == 1, notes
    with sqlite3.connect(tmp_path / "demo.sqlite") as connection:
        finished = connection.execute(
            "SELECT count(*) FROM questions WHERE state IN ('done', 'ungrounded')"
        ).fetchone()[0]
        own = connection.execute("SELECT count(*) FROM calls WHERE step = 'own'").fetchone()[0]
    assert finished >= 1 and own == 0  # answered, and never through own retrieval
