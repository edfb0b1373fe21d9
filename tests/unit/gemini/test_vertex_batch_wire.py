"""Vertex batch prediction's documents: input lines, the job resource, output lines."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.gemini import batch_wire as gw
from pipeline.gemini import vertex_batch_wire as vw
from pipeline.gemini.api_errors import FatalError, PermanentError, TransientError
from pipeline.gemini.request import GroundedRequestBuilder, grounding_tool
from pipeline.gemini.storage import storage_endpoint
from tests.support.batch_parts import write_parts

BODY = GroundedRequestBuilder(
    tool=grounding_tool("google_search"),
    prompt_template="{question}",
    temperature=1.0,
    max_output_tokens=1024,
).body("Who built the Eiffel Tower?")


def test_the_key_rides_in_the_request_labels_and_the_body_is_spliced_unchanged() -> None:
    line = vw.request_line("123", BODY)
    assert line.endswith(b"}\n") and line.count(b"\n") == 1
    document = orjson.loads(line)
    assert list(document) == ["request"]
    request = document["request"]
    assert request.pop("labels") == {"ground_key": "123"}
    assert request == orjson.loads(BODY)
    assert orjson.loads(vw.request_line("7", b"{}")) == {"request": {"labels": {"ground_key": "7"}}}


@pytest.mark.parametrize("key", ["Q1", "a b", "x" * 64, "é", ""])
def test_a_key_that_is_no_label_value_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="label value"):
        vw.request_line(key, BODY)
    assert vw.label_value("q-1_2") == "q-1_2"


def test_parts_use_the_vertex_line_shape(tmp_path: Path) -> None:
    parts = write_parts(
        [(str(i), BODY) for i in range(5)], tmp_path, max_requests=2, encode=vw.request_line
    )
    assert [p.keys for p in parts] == [["0", "1"], ["2", "3"], ["4"]]
    first = parts[0].path.read_bytes().splitlines()[0]
    assert orjson.loads(first)["request"]["labels"] == {"ground_key": "0"}


def test_job_labels_are_checked() -> None:
    assert vw.job_labels({"ground-job": "12", "ground_batch": "3"}) == {
        "ground-job": "12",
        "ground_batch": "3",
    }
    with pytest.raises(ValueError, match="label key"):
        vw.job_labels({"1job": "x"})
    with pytest.raises(ValueError, match="label value"):
        vw.job_labels({"job": "Upper"})


def test_gs_uris() -> None:
    path = vw.parse_gs_uri("gs://my-bucket/ground/in/")
    assert (path.bucket, path.name) == ("my-bucket", "ground/in")
    assert path.child("a.jsonl").uri == "gs://my-bucket/ground/in/a.jsonl"
    assert vw.parse_gs_uri("gs://my-bucket").child("x").uri == "gs://my-bucket/x"
    for bad in ("s3://b/x", "gs://", "gs://UPPER/x", "/local/path"):
        with pytest.raises(ValueError, match=r"gs://|bucket name"):
            vw.parse_gs_uri(bad)


def test_a_prediction_job_resource_becomes_a_batch_job() -> None:
    job = vw.parse_prediction_job(
        {
            "name": "projects/p/locations/us-central1/batchPredictionJobs/456",
            "displayName": "ground-1-2-x",
            "model": "publishers/google/models/gemini-2.5-flash",
            "state": "JOB_STATE_SUCCEEDED",
            "createTime": "2026-12-01T10:00:00.123456789Z",
            "endTime": "2026-12-01T11:00:00Z",
            "outputInfo": {"gcsOutputDirectory": "gs://b/out/prediction-model-2026"},
            "completionStats": {"successfulCount": "8", "failedCount": "2", "incompleteCount": "1"},
            "labels": {"ground-job": "1"},
        }
    )
    assert job.finished and job.state == gw.JOB_STATE_SUCCEEDED
    assert job.responses_file == "gs://b/out/prediction-model-2026"
    assert (job.request_count, job.failed_count) == (11, 2)
    assert job.labels == {"ground-job": "1"} and job.create_time is not None
    failed = vw.parse_prediction_job(
        {
            "name": "projects/p/locations/l/batchPredictionJobs/1",
            "state": "JOB_STATE_FAILED",
            "error": {"code": 3, "message": "Failed to import data"},
        }
    )
    assert failed.finished and failed.error == "Failed to import data"
    assert not vw.parse_prediction_job(
        {"name": "projects/p/locations/l/batchPredictionJobs/2", "state": "JOB_STATE_CANCELLING"}
    ).finished
    with pytest.raises(gw.ProtocolError):
        vw.parse_prediction_job({"name": "batches/1"})


def _line(**fields: object) -> bytes:
    return orjson.dumps(fields)


def test_output_lines_join_by_the_echoed_label() -> None:
    request = {**orjson.loads(BODY), "labels": {"ground_key": "41"}}
    response = {"candidates": [{"content": {"parts": [{"text": "Eiffel"}]}}]}
    ok = vw.parse_prediction_line(
        _line(
            request=request,
            status="",
            response=response,
            processed_time="2026-04-13T10:18:18.102004+00:00",
        )
    )
    assert ok.key == "41" and ok.error is None and orjson.loads(ok.response or b"") == response
    own_key = vw.parse_prediction_line(_line(key="9", request={}, status="", response=response))
    assert own_key.key == "9"
    with pytest.raises(gw.ProtocolError, match="ground_key"):
        vw.parse_prediction_line(_line(request={"contents": []}, status="", response=response))
    with pytest.raises(gw.ProtocolError):
        vw.parse_prediction_line(b"[1]")


@pytest.mark.parametrize(
    ("status", "kind", "http"),
    [
        (
            'Bad Request: {"error": {"code": 400, "message": "Please use a valid role",'
            ' "status": "INVALID_ARGUMENT"}}',
            PermanentError,
            400,
        ),
        (
            'Internal Server Error: {"error": {"code": 500, "message": "Internal error'
            ' encountered.", "status": "INTERNAL"}}',
            TransientError,
            500,
        ),
        ("RESOURCE_EXHAUSTED: quota", TransientError, 429),
        ("Bad Request: the request is malformed", PermanentError, 400),
        ("something odd happened", TransientError, 500),
        ('Forbidden: {"error": {"status": "PERMISSION_DENIED", "message": "no"}}', FatalError, 403),
    ],
)
def test_a_failed_row_is_the_error_online_would_raise(
    status: str, kind: type[Exception], http: int
) -> None:
    result = vw.parse_prediction_line(
        _line(request={"labels": {"ground_key": "3"}}, status=status, processed_time="t")
    )
    assert result.key == "3" and result.response is None
    assert isinstance(result.error, kind) and result.error.http_status == http


def test_an_errors_file_line_and_a_row_with_nothing() -> None:
    errors = vw.parse_prediction_line(
        _line(
            instance={"request": {"labels": {"ground_key": "5"}}},
            error={"code": 13, "message": "Internal"},
        )
    )
    assert errors.key == "5" and isinstance(errors.error, TransientError)
    empty = vw.parse_prediction_line(_line(request={"labels": {"ground_key": "6"}}, status=""))
    assert empty.key == "6" and isinstance(empty.error, TransientError)


def test_output_file_names() -> None:
    assert vw.PREDICTION_FILE.search("out/prediction-model-2026/predictions.jsonl")
    assert vw.PREDICTION_FILE.search("out/prediction-model-2026/predictions_0002.jsonl")
    assert not vw.PREDICTION_FILE.search("out/prediction-model-2026/predictions.jsonl.tmp")
    assert vw.ERRORS_FILE.search("out/d/errors_0001.jsonl")


def test_the_storage_endpoint_comes_from_the_job_then_the_emulator_variable() -> None:
    assert storage_endpoint("", {}) == "https://storage.googleapis.com"
    assert storage_endpoint("", {"STORAGE_EMULATOR_HOST": "localhost:9023"}) == (
        "http://localhost:9023"
    )
    assert storage_endpoint("", {"STORAGE_EMULATOR_HOST": "https://gcs.test/"}) == (
        "https://gcs.test"
    )
    assert storage_endpoint("http://x:1", {"STORAGE_EMULATOR_HOST": "y:2"}) == "http://x:1"
