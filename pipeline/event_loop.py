"""The event loop every command runs on: uvloop where it is installed (it spends less CPU on
each wake-up; measured side by side with asyncio in BENCHMARKS.md), asyncio where it is not or
when ``GROUND_EVENT_LOOP=asyncio`` asks for it."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar, TypeVarTuple, Unpack

import anyio

from pipeline.errors import GroundError

EVENT_LOOP_ENV = "GROUND_EVENT_LOOP"  # "uvloop" (the default where installed) or "asyncio"
LOOPS = ("uvloop", "asyncio")

T = TypeVar("T")
Args = TypeVarTuple("Args")


class LoopChoiceError(GroundError, ValueError):
    """``GROUND_EVENT_LOOP`` names no loop this ``ground`` knows."""


def use_uvloop(env: Mapping[str, str] = os.environ) -> bool:
    """Whether commands run on uvloop: asked for (or not refused) and installed."""
    choice = env.get(EVENT_LOOP_ENV, "").strip().lower() or "uvloop"
    if choice not in LOOPS:
        raise LoopChoiceError(
            f"{EVENT_LOOP_ENV}={env[EVENT_LOOP_ENV]!r}: expected one of {', '.join(LOOPS)}"
        )
    return choice == "uvloop" and importlib.util.find_spec("uvloop") is not None


def run(function: Callable[[Unpack[Args]], Awaitable[T]], *args: *Args) -> T:
    """``function(*args)`` on the chosen event loop, until it returns."""
    return anyio.run(function, *args, backend_options={"use_uvloop": use_uvloop()})
