"""The product path never imports the emulator (only ``ground emulator`` and the tests do), and a
command on a database at the newest schema never imports alembic (only a migration does)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import cli
from tests.support.jobs import make_job

# A fresh interpreter runs one command in-process, then names every emulator or alembic module it
# holds.
PROBE = """
import sys
from pipeline import cli
try:
    status = cli.main(sys.argv[1:])
except SystemExit as stop:  # argparse's --help
    status = stop.code
held = sorted(
    name for name in sys.modules if name.startswith(("pipeline.emulator", "alembic"))
)
print(status, held, file=sys.stderr)
"""


@pytest.mark.parametrize("command", [["status"], ["export", "--out", "answers.jsonl"]])
def test_a_command_on_a_job_imports_neither_the_emulator_nor_alembic(
    tmp_path: Path, command: list[str]
) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=3)
    job = str(tmp_path / "job.toml")
    assert cli.main(["load", job]) == 0
    argv = [command[0], job, *command[1:]]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stderr.splitlines()[-1] == "0 []", done.stderr


def test_ground_emulator_does_import_it() -> None:
    """The probe above can see an import: ``ground emulator --help`` loads the package."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "emulator", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "pipeline.emulator" in done.stderr.splitlines()[-1], done.stderr
