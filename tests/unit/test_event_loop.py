"""The event loop the commands run on: uvloop unless asyncio is asked for; a bad choice is a
usage error in one line."""

from __future__ import annotations

import asyncio

import pytest

from pipeline import event_loop
from pipeline.cli import main


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_is_the_default_and_asyncio_can_be_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert event_loop.use_uvloop({}) is True  # installed with ground
    assert event_loop.use_uvloop({"GROUND_EVENT_LOOP": " UVLOOP "}) is True
    assert event_loop.use_uvloop({"GROUND_EVENT_LOOP": "asyncio"}) is False
    monkeypatch.delenv("GROUND_EVENT_LOOP", raising=False)
    assert event_loop.run(_loop_module).startswith("uvloop")
    monkeypatch.setenv("GROUND_EVENT_LOOP", "asyncio")
    assert event_loop.run(_loop_module).startswith("asyncio")


def test_an_unknown_loop_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GROUND_EVENT_LOOP", "trio")
    with pytest.raises(event_loop.LoopChoiceError, match="expected one of uvloop, asyncio"):
        event_loop.use_uvloop()
    assert main(["status", "jobs/demo.toml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ground: GROUND_EVENT_LOOP='trio': expected one of uvloop, asyncio"]
