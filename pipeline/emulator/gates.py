"""Stages a test can hold: a held stage keeps its requests waiting, counted in ``arrived``, until
it is released, so a test waits on that count rather than on a timer."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable


class StageGates:
    """A service's stages (``upload``, ``poll``, ...), each open until a test holds it."""

    def __init__(self, stages: Iterable[str]) -> None:
        self.arrived: Counter[str] = Counter()
        self._gates = {stage: asyncio.Event() for stage in stages}
        for gate in self._gates.values():
            gate.set()
        self._passes: Counter[str] = Counter()

    def hold(self, stage: str, *, after: int = 0) -> None:
        """Hold ``stage``, letting the first ``after`` arrivals through."""
        self._passes[stage] = after
        self._gates[stage].clear()

    def release(self, stage: str) -> None:
        self._gates[stage].set()

    async def _gate(self, stage: str) -> None:
        gate = self._gates[stage]
        if gate.is_set():
            return
        if self._passes[stage] > 0:
            self._passes[stage] -= 1
            return
        self.arrived[stage] += 1
        await gate.wait()

    def held(self) -> dict[str, int]:
        """How many requests each stage held (``held_<stage>``), for the stats snapshot."""
        return {f"held_{k}": v for k, v in self.arrived.items()}
