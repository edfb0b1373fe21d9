"""Text for a terminal: model output and server messages are untrusted.

An answer, a source title or an error message can carry control characters, and a terminal
obeys some of them (``ESC ]0;...`` retitles the window, other escapes rewrite what is on
screen). Everything printed for a person goes through :func:`printable`, which shows such
characters as ``\\x1b``-style escapes instead of sending them. Newlines and tabs are kept.

A terminal can also go away under a running command (its window or ssh session closed: the
command gets SIGHUP, and every later write fails with EIO). :func:`hung_up` tells such a
failure apart, and :func:`let_go` points the stream at ``/dev/null``, so that the command
ends as it should (drained, its summary file written, its exit status the contract's) with no
one left to read it.
"""

from __future__ import annotations

import errno
import os
import re
from typing import TextIO

__all__ = [
    "hung_up",
    "let_go",
    "printable",
]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters (but newline and tab) shown as escapes."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def hung_up(exc: OSError) -> bool:
    """Whether ``exc`` is a write to a terminal that hung up."""
    return exc.errno == errno.EIO


def let_go(stream: TextIO) -> None:
    """Write ``stream``'s later output to ``/dev/null`` (its terminal hung up)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)
