"""The cap on one question's spend: ``[limits] max_cost_per_question_usd``.

A question whose spend (every ledger row of it: earlier runs, and the calls made for it in
this run) has reached the cap gets no further optional call: no recency nudge after an
ungrounded answer, no re-ask through own retrieval, no call 2 nor its repair. The call under
way when the cap is passed is paid for and its answer kept; the cap stops what would come
after it. The question then says so: its ``error_class`` is ``cost_cap`` and its
``last_error`` names the spend, the cap and the call not made (:meth:`QuestionSpend.note`).

Pure: the prior spend is read from the ledger by the caller, once, before the question's
first call in the run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

__all__ = ["CAP_KEY", "Charged", "QuestionSpend", "cap_micro"]

CAP_KEY = "limits.max_cost_per_question_usd"
_MICRO = 1_000_000


class Charged(Protocol):
    """A ledger row, as far as the cap reads it."""

    @property
    def cost_micro_usd(self) -> int: ...


def cap_micro(usd: float) -> int | None:
    """The cap in micro-dollars (the ledger's unit); None when 0 (no cap)."""
    if usd <= 0:
        return None
    return int(Decimal(str(usd)) * _MICRO)


def _usd(micro: int) -> str:
    return f"${Decimal(micro) / _MICRO:.6f}".rstrip("0").rstrip(".")


@dataclass(slots=True)
class QuestionSpend:
    """One question's spend against its cap: ``before_micro`` from the ledger, plus the calls
    made for it since (:meth:`add`), plus those of the step under way (``extra``)."""

    cap_micro: int
    before_micro: int = 0
    made_micro: int = field(default=0)

    def add(self, calls: Iterable[Charged]) -> None:
        """Count the ledger rows of an outcome handed over."""
        self.made_micro += sum(max(c.cost_micro_usd, 0) for c in calls)

    def spent(self, extra: Iterable[Charged] = ()) -> int:
        """Micro-dollars spent, with ``extra`` (calls of the step under way) counted."""
        return self.before_micro + self.made_micro + sum(max(c.cost_micro_usd, 0) for c in extra)

    def passed(self, extra: Iterable[Charged] = ()) -> bool:
        """The spend has reached the cap: no further optional call."""
        return self.spent(extra) >= self.cap_micro

    def note(self, skipped: str, extra: Iterable[Charged] = ()) -> str:
        """What the question says: its spend, the cap, and the call not made."""
        return (
            f"the question's spend {_usd(self.spent(extra))} reached {CAP_KEY}"
            f" ({_usd(self.cap_micro)}): no {skipped}"
        )
