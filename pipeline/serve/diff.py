"""Two answer versions compared word by word, for the answer page (pure)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_TOKENS = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of text: ``kind`` is ``same``, ``added`` or ``removed``."""

    kind: str
    text: str


def text_diff(before: str, after: str) -> list[Piece]:
    """``after`` against ``before`` as runs of kept, added and removed words (the template
    escapes each run's text)."""
    old, new = _TOKENS.findall(before), _TOKENS.findall(after)
    pieces: list[Piece] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            pieces.append(Piece("same", "".join(old[i1:i2])))
            continue
        if i2 > i1:
            pieces.append(Piece("removed", "".join(old[i1:i2])))
        if j2 > j1:
            pieces.append(Piece("added", "".join(new[j1:j2])))
    return pieces
