"""Limits no run could work under are refused when the job file is loaded, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.job.capacity import RESERVED_FILES, concurrency_ceiling
from pipeline.job.durations import parse_duration
from pipeline.job.grounded_request import smallest_call_tokens
from pipeline.job.sections import MAX_CONCURRENCY
from pipeline.job.spec import JobSpec, JobSpecError, load_jobspec

JOB = '[job]\nname = "t"\n[source]\nfile = "q.jsonl"\n'


def job_file(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "q.jsonl").write_text('{"id": "a", "question": "q"}\n')
    path = tmp_path / "job.toml"
    path.write_text(JOB + extra)
    return path


def refusal(path: Path, *overrides: str) -> str:
    with pytest.raises(JobSpecError) as caught:
        load_jobspec(path, overrides)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("limits.budget_usd=inf", "limits.budget_usd: inf is not a finite number"),
        ("limits.budget_usd=nan", "limits.budget_usd: nan is not a finite number"),
        ("limits.budget_usd=-inf", "limits.budget_usd: -inf is not a finite number"),
        ("model.request_timeout_s=inf", "model.request_timeout_s: inf is not a finite number"),
        ("limits.lease_s=nan", "limits.lease_s: nan is not a finite number"),
        ("resolver.requests_per_second=inf", "resolver.requests_per_second: inf is not"),
        ("resolver.timeout_s=nan", "resolver.timeout_s: nan is not a finite number"),
        ("job.database_outage_s=inf", "job.database_outage_s: inf is not a finite number"),
        ("batch.poll_max_s=inf", "batch.poll_max_s: inf is not a finite number"),
        ("limits.overload_wait_s=inf", "limits.overload_wait_s: inf is not a finite number"),
        ("model.temperature=nan", "model.temperature: nan is not a finite number"),
        ("grounding.location=[nan, 1.0]", "grounding.location: nan is not a finite number"),
    ],
)
def test_non_finite_numbers_are_refused(tmp_path: Path, override: str, says: str) -> None:
    assert says in refusal(job_file(tmp_path), override)


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("limits.budget_usd=1e23", "limits.budget_usd: 1e+23 is more than this key takes"),
        ("limits.lease_s=1e23", "limits.lease_s: 1e+23 is more than this key takes"),
        ("model.request_timeout_s=1e9", "at most 604,800"),
        ("resolver.requests_per_second=1e12", "resolver.requests_per_second: 1e+12"),
        ("limits.requests_per_minute=100000000000", "limits.requests_per_minute"),
        ("limits.concurrency=1000000", "at most 10,000 (calls in flight in one process"),
        ("limits.concurrency=100000000000000000000000", "limits.concurrency"),
        ("limits.concurrency=1e23", "limits.concurrency: Expected `int`, got `float`"),
        ("limits.max_attempts=1000000", "limits.max_attempts"),
        ("limits.overload_wait_s=1e9", "limits.overload_wait_s"),
        ("limits.overload_wait_s=0", "limits.overload_wait_s"),
    ],
)
def test_absurd_numbers_are_refused(tmp_path: Path, override: str, says: str) -> None:
    assert says in refusal(job_file(tmp_path), override)


def test_a_token_limit_below_the_smallest_call_is_refused_with_the_minimum(
    tmp_path: Path,
) -> None:
    path = job_file(tmp_path)
    smallest = _smallest(load_jobspec(path))
    assert smallest > 1
    message = refusal(path, "limits.tokens_per_minute=1")
    assert "limits.tokens_per_minute: 1 is below the smallest call" in message
    assert f"set at least {smallest}" in message
    assert load_jobspec(path, [f"limits.tokens_per_minute={smallest}"])
    # A longer prompt template or system instruction raises the minimum.
    longer = load_jobspec(path, ['model.system_instruction="' + "Answer briefly. " * 40 + '"'])
    assert _smallest(longer) > smallest + 100


def _smallest(spec: JobSpec) -> int:
    return smallest_call_tokens(spec.model, spec.grounding, spec.limits)


def test_concurrency_is_bounded_by_the_open_file_limit() -> None:
    assert concurrency_ceiling(1024, 256) == 1024 - 256 - RESERVED_FILES
    assert concurrency_ceiling(1_048_576, 256) == MAX_CONCURRENCY
    assert concurrency_ceiling(-1, 256) == MAX_CONCURRENCY  # RLIM_INFINITY


def test_concurrency_above_what_this_process_may_open_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 256))
    message = refusal(job_file(tmp_path), "limits.concurrency=500")
    assert "this process may open 256 files (ulimit -n)" in message
    assert "raise `ulimit -n`" in message


def test_a_duration_past_a_century_is_refused() -> None:
    with pytest.raises(ValueError, match="longer than 100 years"):
        parse_duration("99999999999d")
    assert parse_duration("36500d").days == 36500
