"""Text for a terminal: model output and server messages are untrusted.

An answer, a source title or an error message can carry control characters, and a terminal
obeys some of them (``ESC ]0;...`` retitles the window, other escapes rewrite what is on
screen). Everything printed for a person goes through :func:`printable`, which shows such
characters as ``\\x1b``-style escapes instead of sending them. Newlines and tabs are kept.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters (but newline and tab) shown as escapes."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
