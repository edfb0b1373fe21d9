"""A run SIGKILLed while the emulator holds one step of its batch (upload, create, download):
the point the batch crash tests resume from."""

from __future__ import annotations

import signal
import subprocess

from pipeline.emulator.testing import RunningEmulator
from tests.support.waiting import process_exited, wait_until


def kill_held_at(emu: RunningEmulator, stage: str, command: list[str], env: dict[str, str]) -> None:
    """Run ``command`` until the emulator holds it at ``stage`` (held by the caller first:
    ``emu.hold_batch``), then SIGKILL it; the step is let go afterwards."""
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: emu.stats()["batch"].get(f"held_{stage}", 0) >= 1,
            f"the run reaching the {stage} step",
            abort=process_exited(child),
        )
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        emu.release_batch(stage)
        if child.poll() is None:
            child.kill()
            child.wait()
