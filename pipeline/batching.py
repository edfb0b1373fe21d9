"""Group commit: take what has queued up while the previous write ran, as one batch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypeVar

import anyio
from anyio.abc import ObjectReceiveStream

T = TypeVar("T")


async def batches(stream: ObjectReceiveStream[T], max_items: int) -> AsyncIterator[list[T]]:
    """Yield lists of items from ``stream`` until it is closed.

    Each batch waits for one item, then takes every item already waiting, up to
    ``max_items``: under load a batch holds everything that arrived during the previous
    write; when idle, a single item goes out at once (no timer, no added latency).
    """
    async with stream:
        while True:
            try:
                batch = [await stream.receive()]
            except anyio.EndOfStream:
                return
            while len(batch) < max_items:
                try:
                    batch.append(stream.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            yield batch
