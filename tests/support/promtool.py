"""Finding promtool (Prometheus's rule checker) for the tests of the shipped rules and dashboard.

``make test`` puts it in ``.venv/bin`` (from Debian's prometheus package) when it is not on the
PATH; CI always has it, so there a missing promtool fails rather than skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROMTOOL_TIMEOUT_S = 60.0  # seconds for one promtool command


def promtool() -> str:
    """The promtool to run: on the PATH, or beside this Python (``make system-tools``)."""
    found = shutil.which("promtool")
    beside = Path(sys.executable).parent / "promtool"
    if found is None and beside.exists():
        found = str(beside)
    if found is None:
        message = "promtool is not installed (`make system-tools` puts it in .venv/bin)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def run_promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS``, its output captured (the caller checks the status)."""
    return subprocess.run(
        [promtool(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )
