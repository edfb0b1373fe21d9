"""Deterministic per-request randomness.

Every random choice the emulator makes comes from an :class:`Rng` (SplitMix64, cheap to
seed, unlike :class:`random.Random`) seeded by a keyed BLAKE2b hash of the config seed and a
*purpose* plus the bytes the choice depends on (the request text for content, the request
sequence number for faults). The global ``random`` module is never used, so concurrent
requests cannot perturb each other's draws, and the same seed plus the same inputs always
give the same outcome.
"""

from __future__ import annotations

import hashlib

_DIGEST_BYTES = 8  # 64-bit RNG seed


def seed_key(seed: int) -> bytes:
    """The BLAKE2b key for config seed ``seed`` (any int, negative included)."""
    return hashlib.blake2b(str(seed).encode(), digest_size=32, person=b"emu-seed").digest()


def digest(key: bytes, purpose: bytes, data: bytes) -> int:
    """A 64-bit integer determined by (key, purpose, data)."""
    h = hashlib.blake2b(data, digest_size=_DIGEST_BYTES, key=key, person=purpose[:16])
    return int.from_bytes(h.digest(), "big")


_MASK = (1 << 64) - 1
_DOUBLE = 1.0 / (1 << 53)


class Rng:
    """SplitMix64: the subset of :class:`random.Random` the emulator uses, seeded in ~1 µs.

    ``randrange(n)`` is ``floor(random() * n)`` (bias below 2**-40 for the small ``n`` used).
    """

    __slots__ = ("_state",)

    def __init__(self, seed: int) -> None:
        self._state = seed & _MASK

    def _next(self) -> int:
        self._state = s = (self._state + 0x9E3779B97F4A7C15) & _MASK
        z = ((s ^ (s >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def random(self) -> float:
        """Uniform in [0, 1)."""
        return (self._next() >> 11) * _DOUBLE

    def randrange(self, n: int) -> int:
        """Uniform integer in [0, n)."""
        return int(self.random() * n)

    def randint(self, a: int, b: int) -> int:
        """Uniform integer in [a, b]."""
        return a + self.randrange(b - a + 1)

    def uniform(self, a: float, b: float) -> float:
        """Uniform in [a, b)."""
        return a + (b - a) * self.random()


def rng(key: bytes, purpose: bytes, data: bytes) -> Rng:
    """A private RNG for one decision family of one request."""
    return Rng(digest(key, purpose, data))


_SHARE_SCALE = 1.0 / 65536


def shares_and_rng(key: bytes, purpose: bytes, data: bytes) -> tuple[tuple[float, ...], Rng]:
    """Eight uniform draws in [0, 1) (16-bit resolution) plus an RNG, from one hash.

    For the hot path: a request's yes/no decisions cost one BLAKE2b call, not eight draws.
    """
    d = hashlib.blake2b(data, digest_size=24, key=key, person=purpose[:16]).digest()
    units = tuple(int.from_bytes(d[i : i + 2], "big") * _SHARE_SCALE for i in range(0, 16, 2))
    return units, Rng(int.from_bytes(d[16:], "big"))


def unit(key: bytes, purpose: bytes, data: bytes) -> float:
    """One uniform draw in [0, 1) without building an RNG (the hot path)."""
    return digest(key, purpose, data) / 2.0**64
