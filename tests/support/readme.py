"""The README read as the tests need it: its sections and the code blocks in them."""

from __future__ import annotations

import re

from tests.support.paths import REPO

README = REPO / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def section(title: str) -> str:
    """The text under ``## title``, up to the next ``## `` heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def code_blocks(title: str, language: str) -> list[str]:
    """The fenced blocks of ``language`` under ``## title``, as written."""
    return [body for lang, body in _FENCE.findall(section(title)) if lang == language]
