"""The Vertex batch prediction edge (pipeline.gemini.vertex_batch, pipeline.gemini.storage)
against the emulator's batchPredictionJobs and Cloud Storage."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import aiohttp
import anyio
import orjson
import pytest

from pipeline.emulator.clock import FakeClock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini import batch_wire as gw
from pipeline.gemini import vertex_batch_wire as vw
from pipeline.gemini.api_errors import PermanentError, TransientError
from pipeline.gemini.request import GroundedRequestBuilder, grounding_tool
from pipeline.gemini.storage import CHUNK_GRANULARITY, StorageClient, file_md5
from pipeline.gemini.vertex_batch import VertexBatchClient
from pipeline.gemini.wire import decode_response
from tests.support.batch_parts import write_parts
from tests.support.waiting import wait_until

pytestmark = pytest.mark.anyio

MODEL = "gemini-3.8-flash"
PROJECT, LOCATION = "proj-1", "us-central1"
GCS_IN, GCS_OUT = "gs://ground-test/in", "gs://ground-test/out"


class Bearer:
    """A static Vertex token (the emulator accepts its configured bearer_tokens)."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def headers(self) -> Mapping[str, str]:
        return {"authorization": f"Bearer {self.token}"}


def _lines(n: int) -> list[tuple[str, bytes]]:
    builder = GroundedRequestBuilder(
        tool=grounding_tool("google_search"),
        prompt_template="{question}",
        temperature=1.0,
        max_output_tokens=1024,
    )
    return [(str(i), builder.body(f"What is the tallest tower? (#{i})")) for i in range(n)]


def _parts(tmp_path: Path, n: int) -> list[gw.Part]:
    return write_parts(_lines(n), tmp_path, encode=vw.request_line)


def _client(emu: object, **storage: int) -> VertexBatchClient:
    auth = Bearer(emu.bearer_token)  # type: ignore[attr-defined]
    base = emu.base_url  # type: ignore[attr-defined]
    return VertexBatchClient(
        auth,
        project=PROJECT,
        location=LOCATION,
        gcs_input=GCS_IN,
        gcs_output=GCS_OUT,
        base_url=base,
        storage=StorageClient(auth, endpoint=base, **storage),
    )


async def _results(client: VertexBatchClient, job: gw.BatchJob) -> list[gw.ResultLine]:
    files = await client.output_files(job)
    return [
        vw.parse_prediction_line(line) for uri in files async for line in client.download_lines(uri)
    ]


async def test_upload_create_poll_download(tmp_path: Path) -> None:
    clock = FakeClock()
    config = EmulatorConfig(seed=3, batch_delay_s=600.0, batch_failed_row_share=0.2)
    with running_emulator(config, clock=clock) as emu:
        part = _parts(tmp_path, 40)[0]
        async with _client(emu) as client:
            uploaded = await client.upload(part.path, display_name="ground-1-1-a")
            uri = uploaded.name
            assert uri == f"{GCS_IN}/ground-1-1-a.jsonl"
            assert uploaded.md5 == file_md5(part.path)
            labels = {"ground-job": "1", "ground-batch": "1"}
            job = await client.create(MODEL, uri, display_name="ground-1-1-a", labels=labels)
            assert job.name.startswith(f"projects/{PROJECT}/locations/{LOCATION}/")
            assert job.state == "JOB_STATE_PENDING" and not job.finished
            # The display name rides along as a label: a second handle to find the job by.
            assert job.labels == {**labels, "ground-name": "ground-1-1-a"}
            assert job.display_name == "ground-1-1-a"
            assert (await client.find("ground-1-1-a")) == job
            assert await client.find("nobody") is None
            assert [j.name for j in await client.find_by_label("ground-batch", "1")] == [job.name]
            assert await client.output_files(job) == []  # nothing before the job ends
            clock.advance(400)
            assert (await client.get(job.name)).state == "JOB_STATE_RUNNING"
            clock.advance(200)
            done = await client.get(job.name)
            assert done.state == gw.JOB_STATE_SUCCEEDED and done.end_time is not None
            assert done.responses_file is not None
            assert done.responses_file.startswith(f"{GCS_OUT}/ground-1-1-a/prediction-model-")
            files = await client.output_files(done)
            assert files == [f"{done.responses_file}/predictions.jsonl"]
            results = await _results(client, done)
        assert sorted(int(r.key) for r in results) == list(range(40))
        assert [r.key for r in results] != [str(i) for i in range(40)]  # not in input order
        failed = [r for r in results if r.error is not None]
        assert 0 < len(failed) < 20 and done.failed_count == len(failed)
        assert all(isinstance(r.error, TransientError) for r in failed)
        for r in results:
            if r.response is not None:
                assert decode_response(r.response).candidates
        stats = emu.stats()
        assert stats["prediction"]["prediction_jobs_created"] == 1
        assert stats["storage"]["objects_uploaded"] == 1


async def test_an_output_line_is_vertex_shaped_and_echoes_the_request(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=1)) as emu:
        part = _parts(tmp_path, 2)[0]
        async with _client(emu) as client:
            uri = (await client.upload(part.path, display_name="shape")).name
            job = await client.get((await client.create(MODEL, uri, display_name="shape")).name)
            [file] = await client.output_files(job)
            raw = [line async for line in client.download_lines(file)]
        sent = [orjson.loads(line) for line in part.path.read_bytes().splitlines()]
        for line in raw:
            document = orjson.loads(line)
            assert list(document) == ["request", "status", "response", "processed_time"]
            assert document["status"] == ""
            assert document["processed_time"].endswith("+00:00")
            assert {"request": document["request"]} in sent
            response = document["response"]
            assert "createTime" in response and response["candidates"][0]["content"]["parts"]


async def test_a_rerun_finds_the_same_bytes_and_does_not_upload_again(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig()) as emu:
        part = _parts(tmp_path, 30)[0]
        async with _client(emu) as client:
            target = vw.parse_gs_uri(client.input_uri("again"))
            first = await client.upload_object(part.path, target)
            second = await client.upload_object(part.path, target)
            assert first.uploaded and not second.uploaded
            assert first.md5_hash == second.md5_hash == file_md5(part.path)
            part.path.write_bytes(part.path.read_bytes()[: part.size // 2])  # new content
            third = await client.upload_object(part.path, target)
            assert third.uploaded and third.md5_hash != first.md5_hash
        assert emu.stats()["storage"]["objects_uploaded"] == 2


async def test_a_large_part_goes_resumable_and_survives_broken_chunks(tmp_path: Path) -> None:
    config = EmulatorConfig(seed=5, storage_chunk_503_share=0.4)
    with running_emulator(config) as emu:
        data = _parts(tmp_path, 200)[0].path.read_bytes() * 40  # about 2 MB: 8 chunks or more
        assert len(data) > 6 * CHUNK_GRANULARITY
        path = tmp_path / "big.jsonl"
        path.write_bytes(data)
        chunk = 2 * CHUNK_GRANULARITY  # a broken chunk keeps half: one granularity
        async with _client(emu, chunk_bytes=chunk, multipart_max_bytes=1024) as c:
            stored = await c.upload_object(path, vw.parse_gs_uri(f"{GCS_IN}/big.jsonl"))
            assert stored.uploaded and stored.size == len(data)
            lines = [line async for line in c.storage.download_lines("ground-test", "in/big.jsonl")]
        assert b"\n".join(lines) + b"\n" == data
        storage = emu.stats()["storage"]
        assert storage["uploads_started"] == 1 and storage["objects_uploaded"] == 1
        assert storage["upload_chunks"] > len(data) // chunk
        assert storage.get("chunk_503", 0) >= 1


async def test_cancel_expiry_and_a_missing_input(tmp_path: Path) -> None:
    clock = FakeClock()
    config = EmulatorConfig(batch_delay_s=100.0, batch_expire_first=1)
    with running_emulator(config, clock=clock) as emu:
        part = _parts(tmp_path, 10)[0]
        async with _client(emu) as client:
            uri = (await client.upload(part.path, display_name="x")).name
            expiring = await client.create(MODEL, uri, display_name="expiring")
            cancelled = await client.create(MODEL, uri, display_name="cancelled")
            missing = await client.create(MODEL, f"{GCS_IN}/none.jsonl", display_name="missing")
            clock.advance(75)  # RUNNING, halfway through
            await client.cancel(cancelled.name)
            assert (await client.get(cancelled.name)).state == "JOB_STATE_CANCELLING"
            cancelled = await client.get(cancelled.name)
            assert cancelled.state == gw.JOB_STATE_CANCELLED and cancelled.finished
            clock.advance(100)
            expiring = await client.get(expiring.name)
            assert expiring.state == gw.JOB_STATE_EXPIRED
            failed = await client.get(missing.name)
            assert failed.state == gw.JOB_STATE_FAILED and "no such object" in (failed.error or "")
            assert await client.output_files(failed) == []
            partial = await _results(client, expiring)
            cut = await _results(client, cancelled)
            with pytest.raises(PermanentError, match="FAILED_PRECONDITION"):
                await client.cancel(expiring.name)
        assert len(partial) == 5 and expiring.request_count == 10
        assert len(cut) == 5  # the rows done by the cancel time
        assert emu.stats()["prediction"]["prediction_jobs_cancelled"] == 1


async def test_sharded_output_listing_and_cleanup(tmp_path: Path) -> None:
    config = EmulatorConfig(prediction_shard_lines=4)
    with running_emulator(config) as emu:
        part = _parts(tmp_path, 10)[0]
        async with _client(emu) as client:
            uri = (await client.upload(part.path, display_name="shard")).name
            job = await client.get((await client.create(MODEL, uri, display_name="shard")).name)
            files = await client.output_files(job)
            assert [f.rsplit("/", 1)[1] for f in files] == [
                "predictions_0001.jsonl",
                "predictions_0002.jsonl",
                "predictions_0003.jsonl",
            ]
            assert sorted(int(r.key) for r in await _results(client, job)) == list(range(10))
            left = await client.leftovers("shard")
            assert {o.uri for o in left} == {uri, *files}
            assert all(o.size > 0 and o.md5_hash for o in left)
            for obj in left:
                assert await client.delete(obj.uri)
            assert not await client.delete(uri)
            assert await client.leftovers("shard") == []
        assert emu.stats()["storage"]["objects_deleted"] == 4


async def test_auth_and_the_json_api_error_shape(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig()) as emu:
        async with aiohttp.ClientSession() as session:
            url = f"{emu.base_url}/storage/v1/b/ground-test/o/nothing"
            async with session.get(url) as resp:
                assert resp.status == 401
            headers = {"Authorization": f"Bearer {emu.bearer_token}"}
            async with session.get(url, headers=headers) as resp:
                body = await resp.json()
                assert resp.status == 404 and body["error"]["errors"][0]["reason"] == "notFound"
        async with _client(emu) as client:
            assert await client.storage.stat("ground-test", "nothing") is None
            with pytest.raises(PermanentError, match="404"):
                await client.get(f"projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs/9")


async def test_a_service_account_whose_token_uri_is_the_emulator(tmp_path: Path) -> None:
    from google.oauth2 import service_account

    from pipeline.gemini.endpoint import CLOUD_PLATFORM_SCOPE, GoogleAuth
    from tests.support.credentials import service_account_info

    with running_emulator(EmulatorConfig()) as emu:
        info = service_account_info(f"{emu.base_url}/token")
        credentials = service_account.Credentials.from_service_account_info(
            info, scopes=[CLOUD_PLATFORM_SCOPE]
        )
        auth = GoogleAuth(credentials)
        part = _parts(tmp_path, 3)[0]
        storage = StorageClient(auth, endpoint=emu.base_url)
        async with VertexBatchClient(
            auth,
            project=PROJECT,
            location=LOCATION,
            gcs_input=GCS_IN,
            gcs_output=GCS_OUT,
            base_url=emu.base_url,
            storage=storage,
        ) as client:
            uri = (await client.upload(part.path, display_name="sa")).name
            job = await client.get((await client.create(MODEL, uri, display_name="sa")).name)
            assert len(await _results(client, job)) == 3
        assert emu.stats()["tokens_issued"] == 1


async def _held(emu: object, service: str, stage: str) -> None:
    """Wait (off the event loop) until the emulator holds a request at ``stage``."""

    def arrived() -> int:
        return emu.stats()[service].get(f"held_{stage}", 0)  # type: ignore[attr-defined]

    await anyio.to_thread.run_sync(lambda: wait_until(arrived, f"a request held at {stage}"))


async def test_answers_lost_after_upload_and_create_are_found_not_redone(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(batch_delay_s=60.0)) as emu:
        part = _parts(tmp_path, 5)[0]
        async with _client(emu) as client:
            emu.hold_vertex_batch("upload")  # the object is stored, its answer never comes
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: client.upload(part.path, display_name="lost"))
                await _held(emu, "storage", "upload")
                tg.cancel_scope.cancel()
            emu.release_vertex_batch("upload")
            uri = (await client.upload(part.path, display_name="lost")).name  # found: same MD5
            emu.hold_vertex_batch("create")  # the job exists, its name never comes
            labels = {"ground-job": "3", "ground-batch": "7"}
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: client.create(MODEL, uri, display_name="lost", labels=labels))
                await _held(emu, "prediction", "create")
                tg.cancel_scope.cancel()
            emu.release_vertex_batch("create")
            found = await client.find("lost")
            assert found is not None and found.labels == {**labels, "ground-name": "lost"}
            assert [j.name for j in await client.find_by_label("ground-batch", "7")] == [found.name]
            assert await client.find_by_label("ground-batch", "8") == []
        stats = emu.stats()
        assert stats["storage"]["objects_uploaded"] == 1
        assert stats["prediction"]["prediction_jobs_created"] == 1


async def test_find_falls_back_to_the_name_label_when_the_display_name_filter_misses(
    tmp_path: Path,
) -> None:
    with running_emulator(EmulatorConfig(batch_delay_s=60.0)) as emu:
        part = _parts(tmp_path, 2)[0]
        async with _client(emu) as client:
            uri = (await client.upload(part.path, display_name="renamed")).name
            # A job whose display name no longer matches, but whose label still does.
            job = await client.create(
                MODEL, uri, display_name="Renamed Later", labels={"ground-name": "ground-1-x"}
            )
            found = await client.find("ground-1-x")
            assert found is not None and found.name == job.name
            assert await client.find("ground-1-y") is None
            assert await client.find("Not A Label!") is None  # no label value: no second look
