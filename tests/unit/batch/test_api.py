"""Both Batch API clients fill the BatchApi seam (every verb, with its parameters), and what a
stored Vertex batch left in Cloud Storage is read from its row."""

from __future__ import annotations

import datetime as dt
import inspect

import pytest

from pipeline.batch.api import BatchApi
from pipeline.batch.clean import left_behind
from pipeline.gemini.batch import BatchClient
from pipeline.gemini.vertex_batch import VertexBatchClient
from pipeline.store.batches import BatchRow

VERBS = [
    name
    for name, member in inspect.getmembers(BatchApi, inspect.isfunction)
    if not name.startswith("_")
]


def test_the_seam_names_every_verb_batch_mode_uses() -> None:
    assert set(VERBS) == {
        "encode_line",
        "parse_line",
        "upload",
        "create",
        "find",
        "get",
        "cancel",
        "output_files",
        "download_lines",
    }


@pytest.mark.parametrize("client", [BatchClient, VertexBatchClient])
@pytest.mark.parametrize("verb", VERBS)
def test_each_client_has_each_verb_with_its_parameters(client: type, verb: str) -> None:
    wanted = list(inspect.signature(getattr(BatchApi, verb)).parameters.values())
    found = list(inspect.signature(getattr(client, verb)).parameters.values())
    positional = [p for p in wanted if p.kind == inspect.Parameter.POSITIONAL_ONLY]
    # Passed by position: the client may name them in its own terms.
    assert [p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in found][
        : len(positional)
    ] == [True] * len(positional)
    by_name = {p.name: p for p in found[len(positional) :]}
    for parameter in wanted[len(positional) :]:
        assert parameter.name in by_name, f"{client.__name__}.{verb} lacks {parameter.name}"
        assert by_name[parameter.name].kind == parameter.kind
    extra = [p for n, p in by_name.items() if n not in {w.name for w in wanted}]
    assert all(p.default is not inspect.Parameter.empty for p in extra)
    assert inspect.iscoroutinefunction(getattr(client, verb)) == inspect.iscoroutinefunction(
        getattr(BatchApi, verb)
    )


def _row(**fields: object) -> BatchRow:
    now = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
    base: dict[str, object] = dict.fromkeys(BatchRow.__slots__)
    base.update(
        id=1,
        job_id=1,
        step="ground",
        display_name="ground-1-x",
        model="gemini-2.5-flash",
        phase="done",
        requests=1,
        lines_done=1,
        answered=1,
        failed_rows=0,
        returned=0,
        grounded=1,
        ungrounded=0,
        created_at=now,
    )
    base.update(fields)
    return BatchRow(**base)  # type: ignore[arg-type]


def test_what_a_vertex_batch_left_is_its_input_and_its_output_directory() -> None:
    row = _row(
        input_uri="gs://b/in/ground-1-x.jsonl",
        output_uri_prefix="gs://b/out/ground-1-x",
        output_dir="gs://b/out/ground-1-x/prediction-model-2026-12-02T00:00:00.000Z",
    )
    assert left_behind(row) == (
        "gs://b/in/ground-1-x.jsonl",
        "gs://b/out/ground-1-x/prediction-model-2026-12-02T00:00:00.000Z/",
    )
    # Before Vertex names its directory, the prefix the job was given.
    assert left_behind(_row(input_uri="gs://b/in/a.jsonl", output_uri_prefix="gs://b/out/a")) == (
        "gs://b/in/a.jsonl",
        "gs://b/out/a/",
    )
    cleaned = _row(input_uri="gs://b/in/a.jsonl", cleaned_at=dt.datetime.now(dt.UTC))
    assert left_behind(cleaned) == ()
    assert left_behind(_row(file_name="files/abc", responses_file="files/def")) == ()


def test_a_row_names_its_input_and_results_whatever_the_backend() -> None:
    developer = _row(file_name="files/abc", responses_file="files/def")
    vertex = _row(input_uri="gs://b/in/a.jsonl", output_dir="gs://b/out/a/prediction-model-t")
    assert (developer.input_name, developer.results) == ("files/abc", "files/def")
    assert (vertex.input_name, vertex.results) == (
        "gs://b/in/a.jsonl",
        "gs://b/out/a/prediction-model-t",
    )
