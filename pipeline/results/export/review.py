"""The export's review fields: the decision a person took on the review desk (``ground
serve``, or ``ground review import``) on the record's answer version, with who took it, the
note and when; the status is the desk's and ``export --review``'s. Pure."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pipeline.results.export.fields import Field, Kind
from pipeline.store.reviews import PENDING, REVIEW_STATUSES, Review

__all__ = [
    "REVIEW_RECORD",
    "review_fields",
]

REVIEW_RECORD: tuple[Field, ...] = (
    Field(
        "review_status",
        Kind.ENUM,
        "the newest review decision on this answer version (approved, rejected, needs_edit),"
        " or pending; null: no answer to review",
        values=REVIEW_STATUSES,
    ),
    Field("reviewer", Kind.STRING, "who took that decision; null: none taken"),
    Field("review_note", Kind.TEXT, "the reviewer's note with it (what to edit, or why)"),
    Field("reviewed_at", Kind.TIMESTAMP, "when that decision was taken"),
)

UNREVIEWED: dict[str, Any] = dict.fromkeys(f.name for f in REVIEW_RECORD)


def review_fields(decision: Review | None, *, answered: bool) -> dict[str, Any]:
    """A record's review fields for its answer version's newest ``decision`` (None: none)."""
    if not answered:
        return dict(UNREVIEWED)
    if decision is None:
        return {**UNREVIEWED, "review_status": PENDING}
    return {
        "review_status": decision.verdict,
        "reviewer": decision.reviewer,
        "review_note": decision.note,
        "reviewed_at": decision.created_at.astimezone(dt.UTC),
    }
