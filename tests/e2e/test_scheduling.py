"""The cron wrapper in jobs/scheduling maps ground's exit status as its comments say: 1 is
retried, 3 alerts with the failure counts, 2 is not retried; and it runs as written, on
jobs/nightly.toml against the emulator, for each of 0, 1, 2 and 3."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml

from pipeline.cli.parser import build_parser
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import load_jobspec
from tests.support.keys import TEST_API_KEY
from tests.support.metrics import read_textfile, value
from tests.support.paths import REPO

WRAPPER = REPO / "jobs" / "scheduling" / "ground-cron.sh"

# A stand-in for `ground run`: exits with the statuses listed in $FAKE_STATUSES, one per call,
# and writes a summary where --summary-json says.
FAKE_GROUND = """#!/bin/sh
n=$(cat "$FAKE_DIR/calls" 2>/dev/null || echo 0)
echo $((n + 1)) > "$FAKE_DIR/calls"
status=$(echo "$FAKE_STATUSES" | cut -d' ' -f$((n + 1)))
while [ $# -gt 0 ]; do [ "$1" = --summary-json ] && summary=$2; shift; done
printf '{\\n  "failures": {"failed": 4},\\n  "x": 1\\n}\\n' > "$summary"
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
            "PATH": os.environ["PATH"],
            "GROUND_BIN": str(bin_dir),
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
        ("2", 2, 1, "needs an edit"),  # never retried
    ],
)
def test_cron_wrapper_handles_each_status(
    tmp_path: Path, statuses: str, expected: int, calls: int, says: str
) -> None:
    status, out, made = _cron(tmp_path, statuses)
    assert (status, made) == (expected, calls)
    assert says in out
    assert "not-a-real-key" not in out


NIGHTLY = REPO / "jobs" / "nightly.toml"
VENV_BIN = Path(sys.executable).parent  # where this checkout's `ground` is installed
CRON_TIMEOUT_S = 120.0  # seconds for one wrapper run, retries included


@pytest.mark.parametrize(
    ("case", "expected", "attempts", "says"),
    [
        ("ok", 0, 1, ""),
        ("wrong_key", 1, 2, "stopped early 2 times"),  # retried once (GROUND_RETRIES=1)
        ("bad_job_file", 2, 1, "limits.no_such_key"),  # the log's last line, no retry
        ("no_key", 2, 1, "no API key: set GEMINI_API_KEY"),  # an env file without the key
        ("all_blocked", 3, 1, '"blocked": 6'),  # every question failed: alert with counts
    ],
)
def test_the_cron_wrapper_runs_nightly_toml_as_written(
    tmp_path: Path, case: str, expected: int, attempts: int, says: str
) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        "".join(f'{{"id": "q{i}", "question": "Who built bridge {i}?"}}\n' for i in range(6))
    )
    blocked = 1.0 if case == "all_blocked" else 0.0
    with running_emulator(EmulatorConfig(seed=11, block_share=blocked)) as emu:
        host = emu.base_url.split("://", 1)[1]
        flags = [
            "--set",
            f'job.database="sqlite:///{tmp_path / "nightly.sqlite"}"',
            "--set",
            f'source.file="{questions}"',
            "--set",
            f'model.base_url="{emu.base_url}"',
            "--set",
            f'resolver.allow_hosts=["{host}"]',
            "--set",
            "limits.requests_per_minute=60000",
            *{
                "bad_job_file": ["--set", "limits.no_such_key=1"],
                # every answer blocked, and blocked a failure state
                "all_blocked": ["--set", 'job.fail_on=["failed", "blocked"]'],
            }.get(case, []),
        ]
        env_file = tmp_path / "env"
        key = "not-the-emulators-key" if case == "wrong_key" else TEST_API_KEY
        env_file.write_text("" if case == "no_key" else f"GEMINI_API_KEY={key}\n")
        state = tmp_path / "state"  # not there yet: the wrapper creates it
        done = subprocess.run(
            ["sh", str(WRAPPER), str(NIGHTLY), *flags],
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path),
                "GROUND_BIN": str(VENV_BIN),
                "GROUND_ENV_FILE": str(env_file),
                "GROUND_STATE_DIR": str(state),
                "GROUND_RETRIES": "1",
                "GROUND_RETRY_DELAY_S": "0",
            },
            capture_output=True,
            text=True,
            timeout=CRON_TIMEOUT_S,
            check=False,
        )
    log = (state / "nightly.log").read_text()
    assert done.returncode == expected, done.stdout + log[-3000:]
    assert says in done.stdout
    assert "Traceback" not in log and key not in log + done.stdout
    assert '"exit_status"' not in log  # the summary goes to its own file, not the log
    if expected != 2:  # what needs an edit is refused before anything is written
        summary = orjson.loads((state / "nightly.summary.json").read_bytes())
        assert summary["exit_status"] == expected
        textfile = read_textfile(state / "ground-nightly.prom")  # beside the log by default
        assert value(textfile, "ground_last_exit_status", ground_job="nightly") == expected
    runs = [line for line in log.splitlines() if line.startswith("results: ")]  # each run's end
    assert len(runs) == (0 if expected == 2 else attempts), log
    if expected == 2:
        assert not (tmp_path / "nightly.sqlite").exists()  # no database made either


def test_the_kubernetes_example_runs_nightly_toml_in_the_repos_image() -> None:
    """Nothing here can build an image: this checks what can be, that the CronJob's command
    line parses and loads jobs/nightly.toml as it would in the pod, that the files its
    comments put in the ConfigMap exist, and that the Dockerfile copies what exists, installs
    from the lock, runs as a user other than root, with `ground` as its entrypoint."""
    text = (REPO / "jobs" / "scheduling" / "ground-cronjob.yaml").read_text()
    cronjob = yaml.safe_load(text)
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounted = container["volumeMounts"][0]["mountPath"]
    args = [a.replace(mounted, str(REPO / "jobs")) for a in container["args"]]
    parsed = build_parser().parse_args(args)
    spec = load_jobspec(parsed.job, parsed.overrides)
    assert spec.database_url.startswith("postgresql") and spec.model.base_url == ""
    assert parsed.metrics_port == container["ports"][0]["containerPort"]
    for name in re.findall(r"--from-file=[\w.]+=(\S+)", text):
        assert (REPO / name).is_file(), name

    dockerfile = (REPO / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), line
    assert "-c requirements.lock" in dockerfile
    users = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["ground"\]', dockerfile, re.MULTILINE)
