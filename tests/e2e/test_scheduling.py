"""The cron wrapper in jobs/scheduling maps ground's exit status as its comments say: 1 is
retried, 3 alerts with the failure counts, 2 is not retried."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

WRAPPER = REPO / "jobs" / "scheduling" / "ground-cron.sh"

# A stand-in for `ground run`: exits with the statuses listed in $FAKE_STATUSES, one per call.
FAKE_GROUND = """#!/bin/sh
n=$(cat "$FAKE_DIR/calls" 2>/dev/null || echo 0)
echo $((n + 1)) > "$FAKE_DIR/calls"
status=$(echo "$FAKE_STATUSES" | cut -d' ' -f$((n + 1)))
printf '{\\n  "failures": {"failed": 4},\\n  "x": 1\\n}\\n' > "$FAKE_DIR/summary.json"
exit "${status:-0}"
"""


def _cron(tmp_path: Path, statuses: str) -> tuple[int, str, int]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ground").write_text(FAKE_GROUND)
    (bin_dir / "ground").chmod(0o755)
    env_file = tmp_path / "env"
    env_file.write_text("GEMINI_API_KEY=not-a-real-key\n")
    (tmp_path / "calls").unlink(missing_ok=True)
    done = subprocess.run(
        ["sh", str(WRAPPER), "job.toml"],
        env={
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "HOME": str(tmp_path),
            "GROUND_ENV_FILE": str(env_file),
            "GROUND_STATE_DIR": str(tmp_path),
            "GROUND_RETRY_DELAY_S": "0",
            "GROUND_RETRIES": "2",
            "FAKE_DIR": str(tmp_path),
            "FAKE_STATUSES": statuses,
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode, done.stdout, int((tmp_path / "calls").read_text())


@pytest.mark.parametrize(
    ("statuses", "expected", "calls", "says"),
    [
        ("0", 0, 1, ""),
        ("1 1 0", 0, 3, ""),  # stopped early twice, then finished
        ("1 1 1 1", 1, 3, "stopped early 3 times"),
        ("3", 3, 1, '"failed": 4'),  # alert with the counts, no retry
        ("2", 2, 1, "a bad job file?"),  # never retried
    ],
)
def test_cron_wrapper_handles_each_status(
    tmp_path: Path, statuses: str, expected: int, calls: int, says: str
) -> None:
    status, out, made = _cron(tmp_path, statuses)
    assert (status, made) == (expected, calls)
    assert says in out
    assert "not-a-real-key" not in out
