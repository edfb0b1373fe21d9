"""The log format chosen when none is given: text on a terminal, JSON lines otherwise."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.exit_codes import EXIT_USAGE
from pipeline.watch.logs import default_format

GROUND = Path(sys.executable).parent / "ground"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_text_and_a_file_json() -> None:
    assert default_format(_Terminal()) == "text"
    assert default_format(io.StringIO()) == "json"


def test_no_stderr_at_all_gets_json(monkeypatch: pytest.MonkeyPatch) -> None:
    # Python sets sys.stderr to None when started with file descriptor 2 closed (`2>&-`)
    # or without a console.
    monkeypatch.setattr(sys, "stderr", None)
    assert default_format() == "json"


def test_a_command_run_with_stderr_closed_still_runs(tmp_path: Path) -> None:
    """Before, choosing the log format raised AttributeError (unprintable, exit 1)."""
    job = tmp_path / "absent.toml"
    done = subprocess.run(
        [str(GROUND), "status", str(job)],
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: os.close(2),  # the child starts with no stderr
        check=False,
        timeout=60,
    )
    assert done.returncode == EXIT_USAGE  # the job file is missing: named, not a crash
