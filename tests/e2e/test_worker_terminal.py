"""``ground worker --processes N`` on a terminal is one run to a person: one progress line for
all N processes, one closing summary whose counts are ``ground status``'s, one line per stop,
and the exit status of the worst child. Driven in tmux, a real terminal."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from tests.support.jobs import make_job
from tests.support.keys import TEST_API_KEY

GROUND = Path(sys.executable).parent / "ground"
DEADLINE_S = 60.0
PROCESSES = 3
N_QUESTIONS = 60

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None and not os.environ.get("CI"),
    reason="tmux is not installed (`make system-tools` installs it)",
)


@dataclass(frozen=True)
class _Terminal:
    """A detached tmux session (150 x 50)."""

    session: str

    def screen(self) -> str:
        return subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", self.session],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    def press(self, keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.session, keys], check=True)


@contextmanager
def _terminal(command: str) -> Iterator[_Terminal]:
    """``command`` on a terminal of its own."""
    session = f"ground-worker-{os.getpid()}-{time.monotonic_ns()}"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "50", command],
        check=True,
    )
    try:
        yield _Terminal(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


def _wait_for(terminal: _Terminal, what: str, seen: Callable[[str], bool]) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while not seen(text := terminal.screen()):
        assert time.monotonic() < deadline, f"no {what} on the terminal:\n{text}"
        time.sleep(0.1)
    return text


def _worker_command(directory: Path) -> str:
    return (
        f"cd {directory} && GEMINI_API_KEY={TEST_API_KEY} {GROUND} worker job.toml"
        f" --processes {PROCESSES}; echo GROUND-EXIT=$?; sleep 600"
    )


def _status(directory: Path) -> str:
    return subprocess.run(
        [str(GROUND), "status", "job.toml"],
        cwd=directory,
        env={**os.environ, "GEMINI_API_KEY": TEST_API_KEY},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_n_processes_show_one_progress_line_and_one_summary_equal_to_status(
    tmp_path: Path,
) -> None:
    with running_emulator(EmulatorConfig(seed=5, latency_p50_ms=20)) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS)
        with _terminal(_worker_command(tmp_path)) as terminal:
            text = _wait_for(terminal, "exit status", lambda s: "GROUND-EXIT=" in s)
    assert "GROUND-EXIT=0" in text
    lines = text.splitlines()
    bars = [line for line in lines if line.startswith("grounding")]
    assert len(bars) == 1, text  # one line for all the processes, not one bar each
    assert bars[0].startswith(f"grounding ({PROCESSES} processes)")
    assert f"{N_QUESTIONS}/{N_QUESTIONS}" in bars[0]
    assert not [line for line in lines if line.startswith("run: ")], text  # no child's own
    closing = [line for line in lines if line.startswith("worker, ")]
    assert len(closing) == 1, text
    assert closing[0].startswith(f"worker, {PROCESSES} processes: {N_QUESTIONS} questions finished")
    # Its counts are `ground status`'s.
    status = _status(tmp_path)
    finished = dict(re.findall(r"(\w+) (\d+)", closing[0].split("(", 1)[1].split(")")[0]))
    states = next(line for line in status.splitlines() if line.startswith("  states: "))
    assert finished == dict(re.findall(r"(\w+) (\d+)", states)), (closing[0], states)
    assert f"job test: {N_QUESTIONS} questions, {N_QUESTIONS} finished" in text
    assert states in text
    calls = re.search(r"; (\d+) calls", closing[0])
    assert calls is not None and f"calls made: {calls.group(1)};" in status


def test_a_ctrl_c_is_one_line_and_the_worst_childs_exit_status(tmp_path: Path) -> None:
    # 300 requests a minute for the job: 60 questions take 12 s at least, so the Ctrl-C comes
    # mid-run (once the line shows a question finished) however slow the machine is.
    with running_emulator(EmulatorConfig(seed=6, latency_p50_ms=20)) as emu:
        overrides = ["limits.requests_per_minute=300"]
        make_job(tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, overrides=overrides)
        with _terminal(_worker_command(tmp_path)) as terminal:
            _wait_for(terminal, "question finished", lambda s: _finished_on_the_line(s) > 0)
            terminal.press("C-c")
            text = _wait_for(terminal, "exit status", lambda s: "GROUND-EXIT=" in s)
    assert "GROUND-EXIT=1" in text  # each child stopped early: exit 1
    stops = [line for line in text.splitlines() if "stopped early" in line]
    assert stops == ["ground: run stopped early: SIGINT received"], text
    assert text.count("action=stop") <= 1, text  # the children's same log record, said once
    assert len([line for line in text.splitlines() if line.startswith("worker, ")]) == 1
    assert "Traceback" not in text


def _finished_on_the_line(screen: str) -> int:
    found = re.search(r"^grounding \(\d+ processes\).*?(\d+)/\d+", screen, re.M)
    return int(found.group(1)) if found else 0


def test_a_ctrl_c_log_line_is_not_drawn_into_the_progress_bar(tmp_path: Path) -> None:
    # 300 requests a minute (set on the command line): 60 questions take 12 s at least, so
    # the Ctrl-C comes mid-run, while the bar is drawn.
    with running_emulator(EmulatorConfig(seed=7, latency_p50_ms=20)) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS)
        command = (
            f"cd {tmp_path} && GEMINI_API_KEY={TEST_API_KEY} {GROUND} run job.toml"
            " --set limits.requests_per_minute=300; echo GROUND-EXIT=$?; sleep 600"
        )
        with _terminal(command) as terminal:
            _wait_for(terminal, "question finished", lambda s: _run_bar_finished(s) > 0)
            terminal.press("C-c")
            text = _wait_for(terminal, "exit status", lambda s: "GROUND-EXIT=" in s)
    assert "GROUND-EXIT=1" in text
    (stopping,) = [line for line in text.splitlines() if "stopping: SIGINT received" in line]
    # The log record has a line of its own: the bar's line was cleared before it.
    assert "grounding" not in stopping and "q/s" not in stopping, text
    assert any(line.startswith("grounding") for line in text.splitlines()), text


def _run_bar_finished(screen: str) -> int:
    found = re.search(r"^grounding .*?(\d+)/\d+", screen, re.M)
    return int(found.group(1)) if found else 0
