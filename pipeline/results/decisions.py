"""Review decisions made elsewhere, read for ``ground review import``: a spreadsheet's
export (CSV with a header) or JSON lines, one decision per row.

Columns: ``id`` (the question's input id), ``verdict`` (approved, rejected or needs edit;
case, spaces and hyphens as people type them), and optionally ``note`` and ``reviewer`` (else
the command's ``--reviewer``). The rows are streamed (:func:`iter_decisions`); a bad row
(a missing id, an unknown verdict, a NUL character, text that is not UTF-8, a field over its
limit) is named ``path:line`` in one line, and the command imports nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import GroundError
from pipeline.intake.files import file_records
from pipeline.store import reviews

__all__ = [
    "Decision",
    "DecisionsError",
    "iter_decisions",
    "read_decisions",
]

MAX_NOTE = 4000  # characters, as the desk's form takes
MAX_REVIEWER = 200
_SPELLINGS = {"approve": "approved", "reject": "rejected", "needs_editing": "needs_edit"}


class DecisionsError(GroundError, ValueError):
    """A decisions file that cannot be imported, with the place (``path:line``)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One row of a decisions file, checked."""

    line: int
    qid: str
    verdict: str
    reviewer: str
    note: str | None


def verdict_of(value: object) -> str | None:
    """``value`` as a stored verdict (``Approved``, ``needs edit``, ``needs-edit``...), or
    None when it is none of them."""
    if not isinstance(value, str):
        return None
    word = "_".join(value.strip().lower().replace("-", " ").split())
    word = _SPELLINGS.get(word, word)
    return word if word in reviews.REVIEW_VERDICTS else None


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


_STORED = ("id", "verdict", "reviewer", "note")  # the fields a decision keeps


def _no_nul(place: str, record: dict[str, Any]) -> None:
    for key in _STORED:
        value = record.get(key)
        if isinstance(value, str) and "\x00" in value:
            raise DecisionsError(f"{place}: a NUL character in the {key!r} field")


def read_decisions(path: Path, *, reviewer: str | None, fmt: str = "auto") -> list[Decision]:
    """Every decision of ``path`` (CSV or JSONL, ``auto``: by its suffix), checked; raises
    :class:`DecisionsError` at the first row that cannot be imported."""
    return list(iter_decisions(path, reviewer=reviewer, fmt=fmt))


def iter_decisions(path: Path, *, reviewer: str | None, fmt: str = "auto") -> Iterator[Decision]:
    """The decisions of ``path``, streamed, each checked as it is read; raises
    :class:`DecisionsError` at the first row that cannot be imported."""
    records = file_records(
        path, fmt, required=("id", "verdict"), error=DecisionsError, what="decisions file"
    )
    for line, record in records:
        place = f"{path}:{line}"
        _no_nul(place, record)
        qid = _text(record.get("id"))
        if not qid:
            raise DecisionsError(f"{place}: no id")
        verdict = verdict_of(record.get("verdict"))
        if verdict is None:
            choices = ", ".join(v.replace("_", " ") for v in reviews.REVIEW_VERDICTS)
            raise DecisionsError(
                f"{place}: verdict {_text(record.get('verdict'))!r} is not one of {choices}"
            )
        who = _text(record.get("reviewer")) or _text(reviewer)
        if not who:
            raise DecisionsError(f"{place}: no reviewer: give --reviewer or a reviewer column")
        if len(who) > MAX_REVIEWER:
            raise DecisionsError(f"{place}: the reviewer's name is over {MAX_REVIEWER} characters")
        note = _text(record.get("note"))
        if len(note) > MAX_NOTE:
            raise DecisionsError(f"{place}: the note is over {MAX_NOTE} characters")
        yield Decision(line, qid, verdict, who, note or None)
