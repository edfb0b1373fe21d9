"""Citation precision: how many checked citations hold, with a 95 % Wilson interval.

*Citation precision* = ``supported`` / *readable* checked pairs, where readable pairs are
those with a verdict on the source's content: ``supported``, ``partly``, ``not_supported``,
``contradicted``. ``unreadable`` (the page could not be read), ``no_verdict`` and
``unresolved`` sources are outside the ratio and counted beside it.

``partly`` is **not** counted as supported (nor as half): the headline figure is the strict
one, and ``partly`` is reported as its own figure (its share of the readable pairs), so a
reader sees both how much holds in full and how much holds in part.

The gate (``[verify] fail_below``) fails a class when the **upper** bound of its interval is
below the threshold: the class's precision is then below it with 95 % confidence, and a small
sample's noise alone never fails a job. A class with no readable pair is not judged.

Per answer, the one definition of **verified** (:func:`answer_verified`): at least one
readable pair was checked, and *every* readable pair is ``supported``. ``ground verify``'s
count, ``ground status`` (``answers_verified``), the report, the desk and ``ground export
--verified`` all count this (the SQL of :func:`pipeline.store.citation_verdicts.answer_counts`
is its mirror, and a test holds the two equal).

A second, looser notion is kept under its own name, never "verified": an answer is
**claim-backed** when each of its claims with a readable pair has a ``supported`` one
(a claim citing two sources, one ``supported`` and one ``not_supported``, is backed, but the
answer is not verified). ``verified_fraction`` = the share of its claims with at least one
readable pair whose readable pairs include a ``supported`` one (None when no claim had a
readable pair): an answer is claim-backed when it is 1.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.rows import Checked

__all__ = [
    "READABLE",
    "Checked",
    "Precision",
    "Tally",
    "answer_verified",
    "failing_classes",
    "measure",
    "verified_fractions",
    "wilson_interval",
]

Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
READABLE = frozenset({"supported", "partly", "not_supported", "contradicted"})


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` out of ``n`` (``(0, 1)`` when n = 0)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return (low, high)


@dataclass(slots=True)
class Tally:
    """The verdicts of one class (or of the job)."""

    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, verdict: str, n: int = 1) -> None:
        self.counts[verdict] += n

    @property
    def readable(self) -> int:
        return sum(self.counts.get(v, 0) for v in READABLE)

    @property
    def supported(self) -> int:
        return self.counts.get("supported", 0)

    @property
    def precision(self) -> float | None:
        return self.supported / self.readable if self.readable else None

    @property
    def partly_share(self) -> float | None:
        return self.counts.get("partly", 0) / self.readable if self.readable else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.supported, self.readable)


@dataclass(slots=True)
class Precision:
    """The job's tally and each class's."""

    job: Tally = field(default_factory=Tally)
    by_class: dict[str, Tally] = field(default_factory=dict)


def measure(
    checked: Iterable[Checked], unresolved_by_class: dict[str, int] | None = None
) -> Precision:
    """Tally ``checked`` per class and for the job; ``unresolved`` sources counted beside."""
    result = Precision()
    for c in checked:
        result.job.add(c.verdict)
        result.by_class.setdefault(c.qclass, Tally()).add(c.verdict)
    for qclass, n in (unresolved_by_class or {}).items():
        if n:
            result.job.add("unresolved", n)
            result.by_class.setdefault(qclass, Tally()).add("unresolved", n)
    return result


def answer_verified(verdicts: Iterable[str]) -> bool:
    """Whether an answer checked with these pair ``verdicts`` is **verified** (the module
    docstring): a readable pair, and every readable pair ``supported``."""
    readable = [v for v in verdicts if v in READABLE]
    return bool(readable) and all(v == "supported" for v in readable)


def verified_fractions(checked: Iterable[Checked]) -> dict[int, float | None]:
    """Each answer's ``verified_fraction`` (see the module docstring)."""
    claims: dict[int, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for c in checked:
        claims[c.answer_id][c.claim_index].add(c.verdict)
    fractions: dict[int, float | None] = {}
    for answer_id, by_claim in claims.items():
        readable = [v for v in by_claim.values() if v & READABLE]
        held = sum(1 for v in readable if "supported" in v)
        fractions[answer_id] = held / len(readable) if readable else None
    return fractions


def failing_classes(result: Precision, fail_below: float) -> list[str]:
    """The classes whose interval lies wholly below ``fail_below`` (0: no gate)."""
    if fail_below <= 0:
        return []
    return sorted(
        qclass
        for qclass, tally in result.by_class.items()
        if tally.readable and tally.interval[1] < fail_below
    )
