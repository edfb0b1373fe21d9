"""The commit window: items that trickle in go out together; nothing taken is ever lost."""

from __future__ import annotations

import anyio
import pytest

from pipeline.run.commit_window import batches

pytestmark = pytest.mark.anyio


async def _collect(items: int, **window: object) -> list[list[int]]:
    send, recv = anyio.create_memory_object_stream[int](100)
    out: list[list[int]] = []

    async def consume() -> None:
        async for batch in batches(recv, 3, **window):  # type: ignore[arg-type]
            out.append(batch)

    async with anyio.create_task_group() as group:
        group.start_soon(consume)
        async with send:
            for item in range(items):
                await send.send(item)
                await anyio.sleep(0.001)  # one at a time, as answers arrive when paced
    return out


async def test_without_a_window_each_lone_item_goes_out_at_once() -> None:
    assert await _collect(4) == [[0], [1], [2], [3]]


async def test_the_window_gathers_trickling_items_up_to_the_cap() -> None:
    # A window far longer than the test: only the cap (3) and the stream's end close it.
    assert await _collect(5, linger_s=60.0) == [[0, 1, 2], [3, 4]]


async def test_the_window_closes_once_enough_items_are_in() -> None:
    # linger_items (2) closes the window before the cap (3) and long before linger_s.
    assert await _collect(5, linger_s=60.0, linger_items=2) == [[0, 1], [2, 3], [4]]


async def test_items_already_waiting_go_out_together_up_to_the_cap() -> None:
    # Group commit: what arrived meanwhile is taken at once, past linger_items, up to the cap.
    send, recv = anyio.create_memory_object_stream[int](10)
    async with send:
        for item in range(4):
            send.send_nowait(item)
    out = [batch async for batch in batches(recv, 3, linger_s=60.0, linger_items=2)]
    assert out == [[0, 1, 2], [3]]


async def test_flush_early_closes_the_window_at_once() -> None:
    assert await _collect(3, linger_s=60.0, flush_early=lambda: True) == [[0], [1], [2]]


async def test_an_item_in_the_window_survives_cancellation() -> None:
    send, recv = anyio.create_memory_object_stream[int](10)
    out: list[list[int]] = []

    async def consume() -> None:
        async for batch in batches(recv, 10, linger_s=0.2):
            with anyio.CancelScope(shield=True):
                out.append(batch)

    async with anyio.create_task_group() as group:
        group.start_soon(consume)
        await send.send(1)
        await anyio.sleep(0.01)  # the consumer now lingers with the item in hand
        group.cancel_scope.cancel()
    assert out == [[1]]
