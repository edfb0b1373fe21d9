"""[sources] in the job file: its keys, and its deny list sent as excludeDomains on Vertex."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.job.calls import request_builder
from pipeline.job.source_policy import policy_of
from pipeline.job.spec import JobSpec, JobSpecError, load_jobspec


def _job(tmp_path: Path, *lines: str) -> JobSpec:
    (tmp_path / "questions.jsonl").write_text('{"id": "1", "question": "q"}\n')
    (tmp_path / "job.toml").write_text(
        '[job]\nname = "t"\n\n[source]\nfile = "questions.jsonl"\n', encoding="utf-8"
    )
    return load_jobspec(tmp_path / "job.toml", list(lines), env={})


def _search_tool(spec: JobSpec) -> dict[str, object]:
    body = orjson.loads(request_builder(spec).body("q"))
    return body["tools"][0]


def test_the_vertex_body_carries_deny_domains_as_exclude_domains(tmp_path: Path) -> None:
    spec = _job(
        tmp_path,
        'model.backend="vertex"',
        'grounding.exclude_domains=["already.org"]',
        'sources.deny_domains=["https://www.Spam.com/", "already.org"]',
    )
    assert _search_tool(spec) == {"googleSearch": {"excludeDomains": ["already.org", "spam.com"]}}


def test_the_developer_body_carries_no_exclude_domains(tmp_path: Path) -> None:
    spec = _job(tmp_path, 'sources.deny_domains=["spam.com"]', 'sources.action="drop"')
    assert _search_tool(spec) == {"googleSearch": {}}
    policy = policy_of(spec.sources)
    assert policy.action == "drop"
    assert policy.breaks("https://x.spam.com/")


def test_an_entry_naming_no_domain_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JobSpecError, match=r"sources\.allow_domains: .* names no domain"):
        _job(tmp_path, 'sources.allow_domains=["https:///"]')


def test_an_unknown_action_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JobSpecError, match="sources"):
        _job(tmp_path, 'sources.action="delete"')
