"""Group commit with a commit window: linger up to N seconds or until K items, like Kafka's
``linger.ms``, so items that arrive one at a time (a paced run) still go out in batches."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

__all__ = [
    "batches",
]

T = TypeVar("T")


def _never() -> bool:
    return False


async def batches(
    stream: MemoryObjectReceiveStream[T],
    max_items: int,
    *,
    linger_s: float = 0.0,
    linger_items: int | None = None,
    flush_early: Callable[[], bool] = _never,
) -> AsyncIterator[list[T]]:
    """Yield lists of items from ``stream`` until it is closed.

    Each batch waits for one item, then takes every item already waiting, up to
    ``max_items``. With ``linger_s > 0`` it then keeps the window open for more items until
    ``linger_s`` has passed since the first one or ``linger_items`` (default ``max_items``)
    are in, whichever comes first; ``flush_early()`` (asked after every item) closes the
    window at once, e.g. when the producer knows nothing else is coming. With
    ``linger_s == 0`` (the default) a single item goes out at once: no timer, no added
    latency.

    The window is shielded from cancellation: an item taken from the stream is always
    yielded, at most ``linger_s`` late.
    """
    enough = min(max_items, linger_items or max_items)
    async with stream:
        while True:
            try:
                batch = [await stream.receive()]
            except anyio.EndOfStream:
                return
            closed = _take_waiting(stream, batch, max_items)
            if not closed and linger_s > 0 and len(batch) < enough:
                deadline = anyio.current_time() + linger_s
                with anyio.CancelScope(shield=True, deadline=deadline):
                    while len(batch) < enough and not flush_early():
                        try:
                            batch.append(await stream.receive())
                        except anyio.EndOfStream:
                            closed = True
                            break
                        if _take_waiting(stream, batch, max_items):
                            closed = True
                            break
            yield batch
            if closed:
                return


def _take_waiting(stream: MemoryObjectReceiveStream[T], batch: list[T], max_items: int) -> bool:
    """Move the items already waiting into ``batch`` (up to ``max_items``); True when the
    stream turned out to be closed and drained."""
    while len(batch) < max_items:
        try:
            batch.append(stream.receive_nowait())
        except anyio.WouldBlock:
            return False
        except anyio.EndOfStream:
            return True
    return False
