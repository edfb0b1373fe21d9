"""Billing labels: Google's rules checked at load (exit 2), and the labels spliced into a
request body."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.cli import main
from pipeline.costs.labels import (
    LabelError,
    check_labels,
    label_value,
    request_labels,
    with_labels,
)
from pipeline.job.spec import JobSpecError, load_jobspec


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        ({"Team": "x"}, "key 'Team'"),
        ({"1team": "x"}, "key '1team'"),
        ({"team": "Data"}, "team = 'Data'"),
        ({"team": "a" * 64}, "at most 63"),
        ({"k" * 64: "x"}, "1-63 characters"),
        ({"team": "data eng"}, "team = 'data eng'"),
        ({"goog-x": "1"}, "Google's"),
        ({"ground_job": "x"}, "set by ground itself"),
        ({f"k{i}": "v" for i in range(62)}, "at most 61"),
    ],
)
def test_a_label_google_refuses_is_named(labels: dict[str, str], said: str) -> None:
    with pytest.raises(LabelError, match=None) as raised:
        check_labels(labels)
    assert said in str(raised.value)


def test_valid_labels_pass() -> None:
    check_labels({"team": "data-eng", "cost_center": "", "env": "prod_1"})


def test_a_label_value_is_made_of_any_name() -> None:
    assert label_value("Knowledge Base: Backfill #3") == "knowledge-base-backfill-3"
    assert label_value("host.example:4711:0a1b2c3d") == "host-example-4711-0a1b2c3d"
    assert len(label_value("x" * 200)) == 63


def test_labels_are_spliced_into_the_body() -> None:
    body = orjson.dumps({"contents": [{"parts": [{"text": "q"}]}], "tools": []})
    labels = request_labels("My Job", "host:1:ab", {"team": "data"})
    sent = orjson.loads(with_labels(body, labels, "structure"))
    assert sent["labels"] == {
        "team": "data",
        "ground_job": "my-job",
        "ground_run": "host-1-ab",
        "ground_step": "structure",
    }
    assert sent["contents"] == [{"parts": [{"text": "q"}]}]
    assert orjson.loads(with_labels(b"{}", {}, "ground")) == {"labels": {"ground_step": "ground"}}


def _job(directory: Path, labels: str) -> Path:
    (directory / "questions.jsonl").write_text('{"id": "1", "question": "q"}\n')
    path = directory / "job.toml"
    path.write_text(
        f'[job]\nname = "t"\nlabels = {labels}\n[source]\nfile = "questions.jsonl"\n',
        encoding="utf-8",
    )
    return path


def test_a_bad_label_is_refused_at_load_naming_the_key(tmp_path: Path) -> None:
    path = _job(tmp_path, '{ Team = "x" }')
    with pytest.raises(JobSpecError, match=r"job\.labels: key 'Team'"):
        load_jobspec(path)


def test_a_bad_label_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _job(tmp_path, '{ team = "Data Eng" }')
    assert main(["estimate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "job.labels" in err and "Traceback" not in err
