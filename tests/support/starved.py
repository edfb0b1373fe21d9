"""``python -m tests.support.starved DIR ground-args...``: ``ground`` as its console script runs
it, with an event loop that a test can starve on purpose (what a machine at a load of 25 does
to it): once the file ``DIR/starve`` exists, the run's heartbeat, at its next tick, blocks the
whole event loop (a synchronous wait, as a CPU-bound stretch would) after writing
``DIR/starving``, until the file ``DIR/go`` exists. Meanwhile nothing of the run's loop runs:
no heartbeat, no caller, no writer; its calls on the wire stay on the wire, and the leases it
does not extend lapse in the database. The test sees each step, and waits on no clock.

The block lands between two heartbeats, outside any transaction of the heartbeat's.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pipeline.online.fence import Instant
from pipeline.online.heartbeat import Heartbeat

__all__ = [
    "GO",
    "STARVE",
    "STARVING",
]

STARVE = "starve"  # the test asks for the loop to be starved
STARVING = "starving"  # the run's loop is blocked from now on
GO = "go"  # the test lets the loop run again
POLL_S = 0.02  # seconds between two looks for the go file (the loop blocked meanwhile)


def _starving(directory: Path, original: object) -> object:
    def after_pause(self: Heartbeat, before: Instant, interval: float) -> None:
        if (directory / STARVE).exists() and not (directory / STARVING).exists():
            (directory / STARVING).touch()
            while not (directory / GO).exists():
                time.sleep(POLL_S)  # the event loop's thread, blocked: the loop starves
        original(self, before, interval)  # type: ignore[operator]

    return after_pause


def main() -> int:
    directory, argv = Path(sys.argv[1]), sys.argv[2:]
    original = Heartbeat._after_pause  # pyright: ignore[reportPrivateUsage]
    Heartbeat._after_pause = _starving(directory, original)  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
    from pipeline import cli

    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
