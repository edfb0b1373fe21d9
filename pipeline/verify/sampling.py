"""Which answers are checked: a seeded sample, stratified by question class.

``[verify] sample`` is ``"all"``, a share (``0 < x < 1``: that share of each class, at least
one answer of a class that has any) or a count (an integer >= 1: that many answers, shared
out among the classes in proportion to their size by largest remainder, at least one per
class while the count allows).

**Stable as a job grows.** A class's sample is a prefix of one order of its answers: those
already checked (``kept``: verdicts stored by the verifying model) first, then the rest, each
part ranked by a keyed BLAKE2b hash of (seed, question key). A class's quota is never below
what it has kept. So the same answers are chosen on every rerun with the same seed, and a job
that grows keeps every answer verified before and adds to it, never reshuffling: a class's
quota is never paid for twice (the sample can then be a little above a count asked for, when
the classes' shares moved).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Candidate",
    "choose",
    "parse_sample",
    "sample_size",
]

ALL = "all"


@dataclass(frozen=True, slots=True)
class Candidate:
    """An answer that may be sampled: its key (the question's own id) and its class."""

    key: str
    qclass: str


def parse_sample(value: int | float | str) -> int | float | None:
    """``sample`` as a count (int), a share (float in (0, 1)) or None for all.

    Raises ValueError naming what is accepted."""
    if isinstance(value, str):
        if value.strip().lower() == ALL:
            return None
        raise ValueError(f'{value!r}: give "all", a share (0 < x < 1) or a count (>= 1)')
    if isinstance(value, bool):
        raise ValueError('a share (0 < x < 1), a count (>= 1) or "all"')
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and value >= 1):
        if value < 1:
            raise ValueError(f"{value}: a count is at least 1")
        return int(value)
    if not 0 < value < 1:
        raise ValueError(f'{value}: a share is above 0 and below 1 (1 is a count; or "all")')
    return float(value)


def _rank(seed: int, key: str) -> bytes:
    return hashlib.blake2b(key.encode(), key=seed.to_bytes(8, "big", signed=True)).digest()


def _quotas(sizes: Mapping[str, int], sample: int | float) -> dict[str, int]:
    """How many answers each class gives."""
    if isinstance(sample, float):
        return {c: min(n, max(1, math.ceil(sample * n - 1e-9))) for c, n in sizes.items() if n}
    total = sum(sizes.values())
    if sample >= total:
        return dict(sizes)
    exact = {c: sample * n / total for c, n in sizes.items()}
    quota = {c: int(x) for c, x in exact.items()}
    left = sample - sum(quota.values())
    for c in sorted(exact, key=lambda c: (quota[c] - exact[c], c))[:left]:
        quota[c] += 1
    for c in sorted(sizes, key=lambda c: (-sizes[c], c)):  # an empty share of a class: one
        if quota[c] == 0 and sizes[c]:
            donor = max(quota, key=lambda d: (quota[d], d))
            if quota[donor] > 1:
                quota[donor] -= 1
                quota[c] = 1
    return quota


def sample_size(sizes: Mapping[str, int], sample: int | float | None) -> int:
    """How many answers a sample takes from classes of ``sizes`` answers (None: all)."""
    if sample is None:
        return sum(sizes.values())
    return sum(_quotas({c: n for c, n in sizes.items() if n > 0}, sample).values())


def choose(
    candidates: Sequence[Candidate],
    sample: int | float | None,
    seed: int,
    kept: Collection[str] = (),
) -> list[str]:
    """The keys of the sampled answers, by class then order (deterministic); ``kept``: the
    keys already checked, which stay in the sample."""
    if sample is None:
        return [c.key for c in candidates]
    kept = frozenset(kept)
    by_class: dict[str, list[Candidate]] = defaultdict(list)
    for c in candidates:
        by_class[c.qclass].append(c)
    quotas = _quotas({c: len(group) for c, group in by_class.items()}, sample)
    chosen: list[str] = []
    for qclass in sorted(by_class):
        ranked = sorted(
            by_class[qclass], key=lambda c: (c.key not in kept, _rank(seed, c.key), c.key)
        )
        quota = max(quotas.get(qclass, 0), sum(1 for c in ranked if c.key in kept))
        chosen.extend(c.key for c in ranked[:quota])
    return chosen
