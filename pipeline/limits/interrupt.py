"""The run's stop, as the limits see it: after it, no request that has not been sent is sent.

A caller waits for its permits (its rate slot, its tokens, its budget reservation) in
:class:`~pipeline.limits.JobLimits`. Every such wait sleeps through :meth:`Interrupt.sleep`,
which ends at once when the run stops and raises :class:`~pipeline.errors.NotSent`; the caller
checks :meth:`Interrupt.check` once more after its last permit, just before the request goes
out. The caller then gives back what it holds (its budget hold, its tokens) and the question
is handed back to the queue untouched (no attempt spent). The waits that are database
statements (a grant) are not cut short: they take milliseconds, and the check after them
still holds the request back.
"""

from __future__ import annotations

import anyio

from pipeline.errors import NotSent


class Interrupt:
    """Set once, when the run stops; wakes every wait for a permit."""

    __slots__ = ("_event", "is_set")

    def __init__(self) -> None:
        self.is_set = False
        self._event: anyio.Event | None = None  # made in the event loop, on the first wait

    def set(self) -> None:
        self.is_set = True
        if self._event is not None:
            self._event.set()

    def check(self) -> None:
        """Raise :class:`NotSent` once the run is stopping."""
        if self.is_set:
            raise NotSent("the run is stopping: the request was not sent")

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or until the run stops (then raise :class:`NotSent`)."""
        self.check()
        if self._event is None:
            self._event = anyio.Event()
        with anyio.move_on_after(seconds):
            await self._event.wait()
        self.check()
