"""The run's metrics and its outputs, in-process: what each series says and when it exists,
and an output that cannot be written (logged and counted, never raised)."""

from __future__ import annotations

import logging
import time
from decimal import Decimal
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from sqlalchemy.exc import OperationalError

from pipeline.watch import metrics as metrics_module
from pipeline.watch.exporter import RunExporter
from pipeline.watch.metrics import MAX_CLASS_SERIES, OTHER_CLASSES, ClassCount, RunMetrics
from pipeline.watch.outputs import first_problem, output_problem, write_atomically
from pipeline.watch.settings import RunSettings
from tests.support.metrics import Samples, names, parse, read_textfile, value


def _samples(metrics: RunMetrics) -> Samples:
    return parse(generate_latest(metrics.registry).decode())


def test_the_settings_are_exported_from_the_start() -> None:
    settings = RunSettings(
        mode="batch",
        backend="vertex",
        model="gemini-2.5-flash",
        requests_per_minute=600,
        budget_usd=Decimal("12.5"),
        progress_interval_s=30.0,
    )
    before = time.time()
    samples = _samples(RunMetrics("nightly", settings=settings))
    info = value(samples, "ground_run_info", mode="batch", backend="vertex")
    assert info == 1
    assert value(samples, "ground_quota_requests_per_minute", ground_job="nightly") == 600
    assert value(samples, "ground_budget_usd") == 12.5
    assert value(samples, "ground_progress_interval_seconds") == 30
    assert value(samples, "ground_run_started_timestamp_seconds") >= before
    assert value(samples, "ground_last_progress_timestamp_seconds") >= before


def test_days_to_the_models_shutdown_only_when_one_is_announced() -> None:
    settings = RunSettings(model="gemini-3.5-flash", days_to_shutdown=30)
    samples = _samples(RunMetrics("nightly", settings=settings))
    assert value(samples, "ground_model_days_to_shutdown", model="gemini-3.5-flash") == 30
    samples = _samples(RunMetrics("nightly", settings=RunSettings(model="gemini-3.8-flash")))
    assert "ground_model_days_to_shutdown" not in names(samples)


def test_no_state_or_queue_series_until_the_job_is_read_so_nothing_reads_a_false_0() -> None:
    metrics = RunMetrics("nightly")
    assert not {"ground_questions", "ground_queue_depth"} & names(_samples(metrics))
    metrics.set_states({"pending": 7, "retry_wait": 2, "done": 1})
    samples = _samples(metrics)
    assert value(samples, "ground_queue_depth") == 9
    assert value(samples, "ground_questions", state="pending") == 7
    assert value(samples, "ground_questions", state="failed") == 0  # every state has a series


def test_progress_is_a_change_in_the_states(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(metrics_module.time, "time", lambda: now[0])
    metrics = RunMetrics("nightly")
    metrics.set_states({"pending": 3})
    now[0] = 1060.0
    metrics.set_states({"pending": 3})  # the same counts: no progress
    assert value(_samples(metrics), "ground_last_progress_timestamp_seconds") == 1000
    now[0] = 1120.0
    metrics.set_states({"pending": 2, "running": 1})
    assert value(_samples(metrics), "ground_last_progress_timestamp_seconds") == 1120


def test_claims_and_verdicts_move_the_state_gauges_between_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(metrics_module.time, "time", lambda: now[0])
    metrics = RunMetrics("nightly")
    metrics.on_claimed(["pending"])  # before the first read: nothing to move from
    assert "ground_questions" not in names(_samples(metrics))
    metrics.set_states({"pending": 5, "retry_wait": 2, "done": 1})
    metrics.on_claimed(["pending", "pending", "retry_wait"])
    samples = _samples(metrics)
    assert value(samples, "ground_questions", state="running") == 3
    assert value(samples, "ground_questions", state="pending") == 3
    assert value(samples, "ground_queue_depth") == 4
    now[0] = 1010.0
    metrics.on_finished("done")
    metrics.on_finished("retry_wait")
    samples = _samples(metrics)
    assert value(samples, "ground_questions", state="running") == 1
    assert value(samples, "ground_questions", state="done") == 2
    assert value(samples, "ground_queue_depth") == 5
    assert value(samples, "ground_last_progress_timestamp_seconds") == 1010
    # A lease taken over from another process (already running): no state goes below 0.
    metrics.set_states({"running": 1})
    metrics.on_claimed(["pending"])
    assert value(_samples(metrics), "ground_questions", state="pending") == 0
    # The tick's read is the truth again, whatever was moved in between.
    metrics.set_states({"pending": 4, "done": 4})
    samples = _samples(metrics)
    assert value(samples, "ground_questions", state="running") == 0
    assert value(samples, "ground_queue_depth") == 4


def test_classes_beyond_the_limit_are_summed_and_a_vanished_class_reads_0() -> None:
    metrics = RunMetrics("nightly")
    many = [ClassCount(f"c{i:03d}", 10, i % 10) for i in range(MAX_CLASS_SERIES + 5)]
    metrics.set_classes(many)
    samples = _samples(metrics)
    assert len([n for n, _ in samples if n == "ground_answers"]) == MAX_CLASS_SERIES + 1
    assert value(samples, "ground_answers", **{"class": OTHER_CLASSES}) == 50
    assert value(samples, "ground_grounded_answers", **{"class": "c007"}) == 7
    metrics.set_classes([ClassCount("c001", 12, 12)])
    samples = _samples(metrics)
    assert value(samples, "ground_answers", **{"class": "c001"}) == 12
    assert value(samples, "ground_answers", **{"class": "c007"}) == 0


def test_source_outcomes_are_read_from_the_resolvers_counts_when_scraped() -> None:
    metrics = RunMetrics("nightly")
    counts: dict[str, int] = {}
    metrics.sources_from(counts)
    assert value(_samples(metrics), "ground_sources_total", status="expired") == 0
    counts.update(resolved=9, expired=1, no_location=2)
    samples = _samples(metrics)
    assert value(samples, "ground_sources_total", status="resolved") == 9
    assert value(samples, "ground_sources_total", status="expired") == 1
    assert value(samples, "ground_sources_total", status="no_location") == 2


def test_the_exit_status_exists_only_once_the_run_has_exited() -> None:
    metrics = RunMetrics("nightly")
    assert "ground_last_exit_status" not in names(_samples(metrics))
    metrics.set_exit(3)
    samples = _samples(metrics)
    assert value(samples, "ground_last_exit_status") == 3
    assert value(samples, "ground_run_finished_timestamp_seconds") > 0


def test_a_textfile_that_cannot_be_written_is_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = RunMetrics("nightly")
    exporter = RunExporter(metrics, str(tmp_path / "gone" / "ground.prom"))
    with caplog.at_level(logging.WARNING):
        exporter.write()
        exporter.exited(0)
        assert not exporter.write_summary(str(tmp_path / "gone" / "summary.json"), b"{}")
    samples = _samples(metrics)
    failed = "ground_output_write_failures_total"
    assert value(samples, failed, output="metrics_textfile") == 2
    assert value(samples, failed, output="summary_json") == 1
    records = [r for r in caplog.records if getattr(r, "action", None) == "output_write_failed"]
    assert [r.output for r in records] == ["metrics_textfile"] * 2 + ["summary_json"]  # type: ignore[attr-defined]
    assert not list(tmp_path.iterdir())


def test_the_textfile_is_replaced_whole(tmp_path: Path) -> None:
    metrics = RunMetrics("nightly")
    path = tmp_path / "ground.prom"
    exporter = RunExporter(metrics, str(path))
    metrics.set_states({"pending": 4})
    exporter.write()
    assert value(parse(path.read_text()), "ground_queue_depth") == 4
    metrics.set_states({"done": 4})
    exporter.exited(0)
    samples = parse(path.read_text())
    assert value(samples, "ground_queue_depth") == 0
    assert value(samples, "ground_last_exit_status") == 0
    assert [p.name for p in tmp_path.iterdir()] == ["ground.prom"]


@pytest.mark.parametrize(
    ("path", "replaced", "says"),
    [
        ("{tmp}/missing/out.json", True, "the directory {tmp}/missing does not exist"),
        ("{tmp}", True, "is a directory, not a file"),
        ("{tmp}/file/out.json", True, "{tmp}/file is not a directory"),
        ("/sys/out.json", True, "cannot write in /sys"),
        ("{tmp}/ok.json", True, None),
        ("{tmp}/file", False, None),
        ("-", False, None),
    ],
)
def test_output_problem_names_the_path_and_why(
    tmp_path: Path, path: str, replaced: bool, says: str | None
) -> None:
    (tmp_path / "file").write_text("x")
    problem = output_problem("--out", path.format(tmp=tmp_path), replaced=replaced)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(f"--out {path.format(tmp=tmp_path)}: ")
        assert says.format(tmp=tmp_path) in problem
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the probe is gone


def test_first_problem_skips_unset_outputs(tmp_path: Path) -> None:
    outputs = [("--a", None), ("--b", str(tmp_path / "x")), ("--c", str(tmp_path / "no" / "y"))]
    assert (
        first_problem(outputs) == f"--c {tmp_path}/no/y: the directory {tmp_path}/no does not exist"
    )
    assert first_problem(outputs[:2]) is None


def test_write_atomically_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    write_atomically(tmp_path / "s.json", b"{}")
    assert (tmp_path / "s.json").read_bytes() == b"{}"
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "missing" / "s.json", b"{}")
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


class _DatabaseAway:
    """An engine whose every connection fails, as during a database restart."""

    def connect(self) -> _DatabaseAway:
        return self

    async def __aenter__(self) -> None:
        raise OperationalError("SELECT 1", {}, OSError("connection refused"))

    async def __aexit__(self, *exc: object) -> None:
        return None


@pytest.mark.anyio
async def test_a_tick_while_the_database_is_away_keeps_the_last_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = RunMetrics("nightly")
    exporter = RunExporter(metrics, str(tmp_path / "ground.prom"))
    with caplog.at_level(logging.WARNING):
        await exporter.begin(_DatabaseAway(), 1, {"pending": 5}, Decimal(0))  # type: ignore[arg-type]
        await exporter.tick()
    assert value(_samples(metrics), "ground_queue_depth") == 5
    assert value(read_textfile(tmp_path / "ground.prom"), "ground_queue_depth") == 5
    assert [getattr(r, "action", None) for r in caplog.records] == ["metrics_read_failed"] * 2


def test_citation_precision_has_no_series_until_set_and_drops_a_class_no_longer_given(
    tmp_path: Path,
) -> None:
    from pipeline.watch.metrics import write_precision_textfile

    metrics = RunMetrics("j")
    name = "ground_citation_precision"
    assert not [s for f in metrics.registry.collect() if f.name == name for s in f.samples]
    metrics.set_citation_precision({"(job)": 0.8, "a": 0.75, "b": None})
    samples = {
        s.labels["class"]: s.value
        for f in metrics.registry.collect()
        if f.name == name
        for s in f.samples
    }
    assert samples == {"(job)": 0.8, "a": 0.75}
    metrics.set_citation_precision({"(job)": 0.9})
    assert [
        s.labels["class"] for f in metrics.registry.collect() if f.name == name for s in f.samples
    ] == ["(job)"]
    path = tmp_path / "verify.prom"
    write_precision_textfile(str(path), "j", {"(job)": 0.5, "x": None})
    text = path.read_text()
    assert 'ground_citation_precision{class="(job)",ground_job="j"} 0.5' in text
    assert 'class="x"' not in text
