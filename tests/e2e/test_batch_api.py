"""The Batch API edge (pipeline.gemini.batch) against the emulator's Batch and Files API."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.emulator.clock import FakeClock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini import batch as gb
from pipeline.gemini import batch_wire as gw
from pipeline.gemini.api_errors import PermanentError, TransientError
from pipeline.gemini.endpoint import ApiKeyAuth
from pipeline.gemini.request import GroundedRequestBuilder, grounding_tool
from pipeline.gemini.wire import decode_response
from tests.support.batch_parts import write_parts

pytestmark = pytest.mark.anyio

MODEL = "gemini-3.8-flash"


def _builder() -> GroundedRequestBuilder:
    return GroundedRequestBuilder(
        tool=grounding_tool("google_search"),
        prompt_template="{question}",
        temperature=1.0,
        max_output_tokens=1024,
    )


def _lines(n: int) -> list[tuple[str, bytes]]:
    builder = _builder()
    return [(str(i), builder.body(f"What is the tallest tower? (#{i})")) for i in range(n)]


def test_request_line_splices_the_body_and_parts_respect_the_limits(tmp_path: Path) -> None:
    lines = _lines(10)
    line = gw.request_line("7", lines[7][1])
    assert orjson.loads(line) == {"key": "7", "request": orjson.loads(lines[7][1])}
    size = len(gw.request_line("0", lines[0][1]))
    parts = write_parts(lines, tmp_path, max_bytes=size * 3 + 5, max_requests=100)
    assert [len(p.keys) for p in parts] == [3, 3, 3, 1]
    assert all(p.size <= size * 3 + 5 for p in parts)
    assert [key for part in parts for key in part.keys] == [str(i) for i in range(10)]
    assert parts[1].path.read_bytes().count(b"\n") == 3
    parts = write_parts(lines, tmp_path / "..", max_requests=4)
    assert [len(p.keys) for p in parts] == [4, 4, 2]
    with pytest.raises(ValueError, match="over"):
        write_parts(lines, tmp_path, max_bytes=10)


def test_states_and_status_lines() -> None:
    assert gw.job_state("BATCH_STATE_SUCCEEDED") == gw.JOB_STATE_SUCCEEDED
    assert gw.job_state("JOB_STATE_EXPIRED") == gw.JOB_STATE_EXPIRED
    failed = gw.parse_result_line(b'{"key":"4","error":{"code":13,"message":"boom"}}')
    assert failed.key == "4" and isinstance(failed.error, TransientError)
    assert failed.error.http_status == 500
    bad = gw.parse_result_line(b'{"key":"5","status":{"code":3,"message":"bad request"}}')
    assert isinstance(bad.error, PermanentError) and bad.error.http_status == 400
    with pytest.raises(gw.ProtocolError):
        gw.parse_result_line(b"not json")


async def test_upload_create_poll_download_on_the_emulator(tmp_path: Path) -> None:
    clock = FakeClock()
    config = EmulatorConfig(seed=3, batch_delay_s=600.0, batch_failed_row_share=0.2)
    with running_emulator(config, clock=clock) as emu:
        parts = write_parts(_lines(40), tmp_path)
        async with gb.BatchClient(ApiKeyAuth(emu.api_key), base_url=emu.base_url) as client:
            file_name = (await client.upload(parts[0].path, display_name="t-0")).name
            assert file_name.startswith("files/")
            job = await client.create(MODEL, file_name, display_name="ground-test-0")
            assert job.name.startswith("batches/") and job.state == gw.JOB_STATE_PENDING
            assert not job.finished and job.create_time is not None
            found = await client.find("ground-test-0")
            assert found is not None and found.name == job.name
            assert await client.find("nobody") is None
            clock.advance(400)
            assert (await client.get(job.name)).state == gw.JOB_STATE_RUNNING
            clock.advance(200)
            done = await client.get(job.name)
            assert done.state == gw.JOB_STATE_SUCCEEDED and done.responses_file
            results = [
                gw.parse_result_line(line)
                async for line in client.download_lines(done.responses_file)
            ]
        assert sorted(int(r.key) for r in results) == list(range(40))
        failed = [r for r in results if r.error is not None]
        assert 0 < len(failed) < 20
        for r in results:
            if r.response is not None:
                response = decode_response(r.response)
                assert response.candidates
        stats = emu.stats()["batch"]
        assert stats["batches_created"] == 1 and stats["files_uploaded"] == 1


async def test_cancel_expire_and_503_polls(tmp_path: Path) -> None:
    clock = FakeClock()
    config = EmulatorConfig(batch_delay_s=10.0, batch_expire_first=1, batch_poll_503_share=0.5)
    with running_emulator(config, clock=clock) as emu:
        parts = write_parts(_lines(3), tmp_path)
        async with gb.BatchClient(ApiKeyAuth(emu.api_key), base_url=emu.base_url) as client:
            file_name = (await client.upload(parts[0].path, display_name="t")).name
            first = await client.create(MODEL, file_name, display_name="a")
            second = await client.create(MODEL, file_name, display_name="b")
            clock.advance(5)
            await client.cancel(second.name)
            clock.advance(10)
            states: dict[str, str] = {}
            unavailable = 0
            while len(states) < 2:
                for name in (first.name, second.name):
                    try:
                        states[name] = (await client.get(name)).state
                    except TransientError as exc:
                        unavailable += exc.http_status == 503
            assert states == {
                first.name: gw.JOB_STATE_EXPIRED,
                second.name: gw.JOB_STATE_CANCELLED,
            }
            assert unavailable == emu.stats()["batch"].get("polls_503", 0)
