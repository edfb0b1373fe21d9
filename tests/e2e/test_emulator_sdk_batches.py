"""Google's SDK (google-genai) drives the emulator's batch surfaces as it drives Google's.

Inline batches answer ``inlinedResponses``, delete works on both surfaces, an upload keeps the
``display_name`` the SDK sends in snake_case, and the counts in ``batchStats`` /
``completionStats`` follow the rows, failed ones included. The shapes the SDK reads are in
``google/genai/batches.py`` (``_BatchJob_from_mldev``, ``_BatchJobDestination_from_mldev``,
``_InlinedResponse_from_mldev``, ``_BatchJob_from_vertex``); docs/wire-format.md cites them.

Every step a user of the SDK takes works: on the Developer API an inline batch, a file batch,
list, cancel, the results read and delete; on Vertex create, poll, cancel, the output read
from Cloud Storage, list and delete. With ``batch_drop_failed_rows`` the stats count rows the
output lacks (what batch mode reconciles).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.emulator.clock import FakeClock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator

genai = pytest.importorskip("google.genai")  # a dev dependency; skips only if not installed
from google.genai import errors, types  # noqa: E402

# A Google from before the shutdowns: these tests exercise each generation, 1.5 to 3.
LEGACY: frozenset[str] = frozenset()

SEARCH = {"tools": [{"google_search": {}}]}


@pytest.fixture
def clocked() -> Iterator[tuple[RunningEmulator, FakeClock]]:
    """Rows take 100 s (50 pending, 50 running) and half of them fail."""
    clock = FakeClock()
    cfg = EmulatorConfig(shutdowns=LEGACY, seed=4, batch_delay_s=100.0, batch_failed_row_share=0.5)
    with running_emulator(cfg, clock=clock) as emu:
        yield emu, clock


def developer_client(emu: RunningEmulator) -> genai.Client:
    return genai.Client(api_key=emu.api_key, http_options=types.HttpOptions(base_url=emu.base_url))


def vertex_client(emu: RunningEmulator) -> genai.Client:
    from google.oauth2.credentials import Credentials

    return genai.Client(
        vertexai=True,
        project="proj-1",
        location="us-central1",
        credentials=Credentials(token=emu.bearer_token),
        http_options=types.HttpOptions(base_url=emu.base_url),
    )


def raw_batch(emu: RunningEmulator, name: str) -> dict[str, Any]:
    """The Operation as sent (the SDK's BatchJob does not carry ``batchStats``)."""
    req = urllib.request.Request(
        f"{emu.base_url}/v1beta/{name}", headers={"x-goog-api-key": emu.api_key}
    )
    with urllib.request.urlopen(req) as answer:
        return json.loads(answer.read())


def inline_requests(n: int) -> list[dict[str, Any]]:
    return [
        {
            "contents": [{"role": "user", "parts": [{"text": f"Eiffel tower #{i}"}]}],
            "config": SEARCH,
            "metadata": {"key": f"q{i}"},
        }
        for i in range(n)
    ]


def test_an_inline_batch_answers_inlined_responses_and_is_deleted() -> None:
    with running_emulator(EmulatorConfig(shutdowns=LEGACY, seed=4, batch_delay_s=0.0)) as emu:
        client = developer_client(emu)
        job = client.batches.create(
            model="gemini-2.5-flash", src=inline_requests(3), config={"display_name": "inline"}
        )
        assert job.name and job.name.startswith("batches/")
        done = client.batches.get(name=job.name)
        assert done.state == types.JobState.JOB_STATE_SUCCEEDED
        assert done.display_name == "inline"
        assert done.dest is not None and done.dest.file_name is None
        answers = done.dest.inlined_responses
        assert answers is not None and len(answers) == 3
        for i, answer in enumerate(answers):
            assert answer.error is None and answer.response is not None
            gm = answer.response.candidates[0].grounding_metadata
            assert gm is not None and gm.grounding_chunks
            assert answer.response.text
            assert answer.metadata == {"key": f"q{i}"}  # join by it: order is not promised
        op = raw_batch(emu, job.name)
        stats = op["metadata"]["batchStats"]
        assert stats == {"requestCount": "3", "successfulRequestCount": "3"}
        assert op["response"]["inlinedResponses"]["inlinedResponses"][0]["metadata"] == {
            "key": "q0"
        }

        client.batches.delete(name=job.name)
        with pytest.raises(errors.ClientError) as info:
            client.batches.get(name=job.name)
        assert info.value.code == 404
        assert all(b.name != job.name for b in client.batches.list())
        counts = emu.stats()["batch"]
        assert counts["inline_batches_created"] == 1 and counts["batches_deleted"] == 1


def test_an_upload_keeps_the_snake_case_display_name(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(shutdowns=LEGACY, seed=4)) as emu:
        client = developer_client(emu)
        path = tmp_path / "requests.jsonl"
        path.write_text('{"key": "a", "request": {"contents": [{"parts": [{"text": "x"}]}]}}\n')
        uploaded = client.files.upload(
            file=path,
            config=types.UploadFileConfig(mime_type="application/jsonl", display_name="questions"),
        )
        assert uploaded.display_name == "questions"
        assert client.files.get(name=uploaded.name).display_name == "questions"


def test_batch_stats_follow_the_rows_and_count_the_failed(
    clocked: tuple[RunningEmulator, FakeClock], tmp_path: Path
) -> None:
    emu, clock = clocked
    client = developer_client(emu)
    lines = [
        {"key": f"q{i}", "request": {"contents": [{"parts": [{"text": f"Taj Mahal {i}"}]}]}}
        for i in range(10)
    ]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    uploaded = client.files.upload(
        file=path, config=types.UploadFileConfig(mime_type="application/jsonl")
    )
    job = client.batches.create(model="gemini-2.5-flash", src=uploaded.name)
    assert job.name is not None
    stats = raw_batch(emu, job.name)["metadata"]["batchStats"]
    assert stats == {"requestCount": "10", "pendingRequestCount": "10"}

    clock.advance(75.0)  # half way through RUNNING: 5 of 10 rows answered
    stats = raw_batch(emu, job.name)["metadata"]["batchStats"]
    answered = int(stats.get("successfulRequestCount", 0)) + int(stats.get("failedRequestCount", 0))
    assert answered == 5 and stats["pendingRequestCount"] == "5"

    clock.advance(25.0)
    done = client.batches.get(name=job.name)
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED
    stats = raw_batch(emu, job.name)["metadata"]["batchStats"]
    assert "pendingRequestCount" not in stats
    assert done.dest is not None and done.dest.file_name
    rows = [json.loads(x) for x in client.files.download(file=done.dest.file_name).splitlines()]
    failed = sum(1 for r in rows if "error" in r)
    assert failed > 0, "seed 4 at a 0.5 share fails some of 10 rows"
    assert stats["failedRequestCount"] == str(failed)
    assert stats["successfulRequestCount"] == str(10 - failed)


def test_an_inline_row_that_fails_answers_an_error(
    clocked: tuple[RunningEmulator, FakeClock],
) -> None:
    emu, clock = clocked
    client = developer_client(emu)
    job = client.batches.create(model="gemini-2.5-flash", src=inline_requests(8))
    assert job.name is not None
    clock.advance(100.0)
    answers = client.batches.get(name=job.name).dest.inlined_responses  # type: ignore[union-attr]
    assert answers is not None and len(answers) == 8
    errors_seen = [a for a in answers if a.error is not None]
    assert errors_seen and all(a.response is None for a in errors_seen)
    stats = raw_batch(emu, job.name)["metadata"]["batchStats"]
    assert stats.get("failedRequestCount") == str(len(errors_seen))


def put_object(emu: RunningEmulator, bucket: str, name: str, data: bytes) -> None:
    req = urllib.request.Request(
        f"{emu.base_url}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}",
        data=data,
        method="POST",
        headers={
            "Authorization": f"Bearer {emu.bearer_token}",
            "Content-Type": "application/jsonl",
        },
    )
    with urllib.request.urlopen(req) as answer:
        assert answer.status == 200


def test_vertex_jobs_count_their_rows_and_are_deleted_once_finished(
    clocked: tuple[RunningEmulator, FakeClock],
) -> None:
    emu, clock = clocked
    rows = [
        {
            "request": {
                "contents": [{"role": "user", "parts": [{"text": f"Taj Mahal {i}"}]}],
                "labels": {"ground_key": f"q{i}"},
            }
        }
        for i in range(10)
    ]
    put_object(emu, "b", "in.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    client = vertex_client(emu)
    job = client.batches.create(
        model="gemini-2.5-flash",
        src="gs://b/in.jsonl",
        config={"display_name": "sdk-vertex", "dest": "gs://b/out"},
    )
    assert job.name is not None and job.state == types.JobState.JOB_STATE_PENDING
    with pytest.raises(errors.ClientError) as info:
        client.batches.delete(name=job.name)  # only a finished job can be deleted
    assert info.value.code == 400

    clock.advance(75.0)
    running = client.batches.get(name=job.name)
    assert running.state == types.JobState.JOB_STATE_RUNNING
    cs = running.completion_stats
    assert cs is not None and cs.incomplete_count == 5
    assert (cs.successful_count or 0) + (cs.failed_count or 0) == 5

    clock.advance(25.0)
    done = client.batches.get(name=job.name)
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED
    cs = done.completion_stats
    assert cs is not None and cs.incomplete_count == 0
    assert cs.failed_count and cs.successful_count == 10 - cs.failed_count

    deleted = client.batches.delete(name=job.name)
    assert deleted.done is True and deleted.error is None
    with pytest.raises(errors.ClientError) as info:
        client.batches.get(name=job.name)
    assert info.value.code == 404
    assert all(j.name != job.name for j in client.batches.list())
    counts = emu.stats()
    assert counts["prediction"]["prediction_jobs_deleted"] == 1
    assert counts["storage"]["objects"] >= 2  # the input and the output stay


# --- every step, as a user of the SDK takes them ----------------------------------------------


def jsonl_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "requests.jsonl"
    lines = [
        {"key": f"q{i}", "request": {"contents": [{"parts": [{"text": f"Eiffel tower {i}"}]}]}}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_developer_api_through_the_sdk_inline_file_list_cancel_delete(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    with running_emulator(
        EmulatorConfig(shutdowns=LEGACY, seed=4, batch_delay_s=100.0), clock=clock
    ) as emu:
        client = developer_client(emu)
        uploaded = client.files.upload(
            file=jsonl_file(tmp_path, 4),
            config=types.UploadFileConfig(mime_type="application/jsonl", display_name="four"),
        )
        assert uploaded.name is not None
        by_file = client.batches.create(
            model="gemini-2.5-flash", src=uploaded.name, config={"display_name": "file"}
        )
        inline = client.batches.create(
            model="gemini-2.5-flash", src=inline_requests(2), config={"display_name": "inline"}
        )
        doomed = client.batches.create(model="gemini-2.5-flash", src=inline_requests(1))
        assert by_file.name and inline.name and doomed.name
        assert by_file.state == types.JobState.JOB_STATE_PENDING
        # (the SDK reads no input back on this surface: _BatchJob_from_mldev)
        assert raw_batch(emu, by_file.name)["metadata"]["inputConfig"] == {
            "fileName": uploaded.name
        }

        # list: every batch, newest first, one page at a time
        listed = list(client.batches.list(config=types.ListBatchJobsConfig(page_size=2)))
        assert [b.name for b in listed] == [doomed.name, inline.name, by_file.name]
        assert [b.display_name for b in listed[1:]] == ["inline", "file"]

        # cancel: a running batch ends CANCELLED, the others go on
        clock.advance(60.0)
        assert client.batches.get(name=doomed.name).state == types.JobState.JOB_STATE_RUNNING
        client.batches.cancel(name=doomed.name)
        assert client.batches.get(name=doomed.name).state == types.JobState.JOB_STATE_CANCELLED

        clock.advance(40.0)
        done = client.batches.get(name=by_file.name)
        assert done.state == types.JobState.JOB_STATE_SUCCEEDED and done.end_time
        assert done.dest is not None and done.dest.file_name
        rows = [json.loads(x) for x in client.files.download(file=done.dest.file_name).splitlines()]
        assert sorted(r["key"] for r in rows) == ["q0", "q1", "q2", "q3"]
        assert all(r["response"]["candidates"][0]["content"]["parts"] for r in rows)
        answers = client.batches.get(name=inline.name).dest.inlined_responses  # type: ignore[union-attr]
        assert answers is not None and all(a.response for a in answers)
        # joined by metadata: Google is reported to reorder inline answers
        assert sorted(str(a.metadata) for a in answers) == ["{'key': 'q0'}", "{'key': 'q1'}"]

        # delete: each batch leaves get and list; the result file stays downloadable
        for name in (by_file.name, inline.name, doomed.name):
            client.batches.delete(name=name)
            with pytest.raises(errors.ClientError) as info:
                client.batches.get(name=name)
            assert info.value.code == 404
        assert list(client.batches.list()) == []
        assert client.files.download(file=done.dest.file_name)
        counts = emu.stats()["batch"]
        assert counts["batches_deleted"] == 3 and counts["batches_cancelled"] == 1


def read_object(emu: RunningEmulator, bucket: str, name: str) -> bytes:
    quoted = urllib.parse.quote(name, safe="")
    req = urllib.request.Request(
        f"{emu.base_url}/storage/v1/b/{bucket}/o/{quoted}?alt=media",
        headers={"Authorization": f"Bearer {emu.bearer_token}"},
    )
    with urllib.request.urlopen(req) as answer:
        return answer.read()


def test_vertex_through_the_sdk_create_poll_read_cancel_list_delete() -> None:
    clock = FakeClock()
    with running_emulator(
        EmulatorConfig(shutdowns=LEGACY, seed=4, batch_delay_s=100.0), clock=clock
    ) as emu:
        rows = [
            {
                "request": {
                    "contents": [{"role": "user", "parts": [{"text": f"Taj Mahal {i}"}]}],
                    "labels": {"ground_key": f"q{i}"},
                }
            }
            for i in range(3)
        ]
        put_object(emu, "b", "in.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
        client = vertex_client(emu)
        kept = client.batches.create(
            model="gemini-2.5-flash",
            src="gs://b/in.jsonl",
            config={"display_name": "kept", "dest": "gs://b/kept"},
        )
        doomed = client.batches.create(
            model="gemini-2.5-flash",
            src="gs://b/in.jsonl",
            config={"display_name": "doomed", "dest": "gs://b/doomed"},
        )
        assert kept.name and doomed.name and kept.name != doomed.name
        assert kept.src is not None and kept.src.gcs_uri == ["gs://b/in.jsonl"]

        # poll
        assert client.batches.get(name=kept.name).state == types.JobState.JOB_STATE_PENDING
        clock.advance(60.0)
        assert client.batches.get(name=kept.name).state == types.JobState.JOB_STATE_RUNNING

        # cancel: CANCELLING at the next poll, CANCELLED after
        client.batches.cancel(name=doomed.name)
        assert client.batches.get(name=doomed.name).state == types.JobState.JOB_STATE_CANCELLING
        assert client.batches.get(name=doomed.name).state == types.JobState.JOB_STATE_CANCELLED

        # read: the finished job names its output directory; its lines carry the keys
        clock.advance(40.0)
        done = client.batches.get(name=kept.name)
        assert done.state == types.JobState.JOB_STATE_SUCCEEDED
        assert done.dest is not None and done.dest.gcs_uri == "gs://b/kept"
        out = done.output_info.gcs_output_directory if done.output_info else None
        assert out is not None and out.startswith("gs://b/kept/prediction-model-")
        bucket, _, prefix = out.removeprefix("gs://").partition("/")
        lines = read_object(emu, bucket, f"{prefix}/predictions.jsonl").splitlines()
        keys = sorted(json.loads(x)["request"]["labels"]["ground_key"] for x in lines)
        assert keys == ["q0", "q1", "q2"]
        assert all(json.loads(x)["response"]["candidates"] for x in lines)

        # list: both jobs, newest first; a filter on the display name finds one
        assert [j.name for j in client.batches.list()] == [doomed.name, kept.name]
        found = client.batches.list(config={"filter": 'display_name="kept"'})
        assert [j.name for j in found] == [kept.name]

        # delete: both finished jobs leave get and list
        for name in (kept.name, doomed.name):
            assert client.batches.delete(name=name).done is True
            with pytest.raises(errors.ClientError) as info:
                client.batches.get(name=name)
            assert info.value.code == 404
        assert list(client.batches.list()) == []
        counts = emu.stats()["prediction"]
        assert counts["prediction_jobs_cancelled"] == 1
        assert counts["prediction_jobs_deleted"] == 2


def test_dropped_rows_are_counted_failed_and_absent_from_the_output(tmp_path: Path) -> None:
    """``batch_drop_failed_rows``: the stats count the failed rows, the output lacks them."""
    cfg = EmulatorConfig(
        shutdowns=LEGACY, seed=4, batch_failed_row_share=0.5, batch_drop_failed_rows=True
    )
    with running_emulator(cfg) as emu:
        client = developer_client(emu)
        uploaded = client.files.upload(
            file=jsonl_file(tmp_path, 10),
            config=types.UploadFileConfig(mime_type="application/jsonl"),
        )
        assert uploaded.name is not None
        job = client.batches.create(model="gemini-2.5-flash", src=uploaded.name)
        assert job.name is not None
        done = client.batches.get(name=job.name)
        assert done.dest is not None and done.dest.file_name
        rows = [json.loads(x) for x in client.files.download(file=done.dest.file_name).splitlines()]
        stats = raw_batch(emu, job.name)["metadata"]["batchStats"]
        failed = int(stats["failedRequestCount"])
        assert failed > 0 and len(rows) == 10 - failed
        assert all("response" in r for r in rows)
        assert stats["successfulRequestCount"] == str(len(rows))
        inline = client.batches.create(model="gemini-2.5-flash", src=inline_requests(10))
        assert inline.name is not None
        answers = client.batches.get(name=inline.name).dest.inlined_responses  # type: ignore[union-attr]
        stats = raw_batch(emu, inline.name)["metadata"]["batchStats"]
        assert answers is not None and len(answers) == 10 - int(stats["failedRequestCount"])
        assert all(a.error is None for a in answers)

        put_object(
            emu,
            "b",
            "in.jsonl",
            b"".join(
                json.dumps(
                    {"request": {"contents": [{"parts": [{"text": f"x{i}"}]}], "labels": {}}}
                ).encode()
                + b"\n"
                for i in range(10)
            ),
        )
        vertex = vertex_client(emu)
        vjob = vertex.batches.create(
            model="gemini-2.5-flash", src="gs://b/in.jsonl", config={"dest": "gs://b/out"}
        )
        assert vjob.name is not None
        vdone = vertex.batches.get(name=vjob.name)
        cs = vdone.completion_stats
        out = vdone.output_info.gcs_output_directory if vdone.output_info else None
        assert cs is not None and cs.failed_count and out is not None
        bucket, _, prefix = out.removeprefix("gs://").partition("/")
        lines = read_object(emu, bucket, f"{prefix}/predictions.jsonl").splitlines()
        assert len(lines) == 10 - cs.failed_count == cs.successful_count
