from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.job.spec import JobSpecError, load_jobspec
from tests.support.paths import REPO

DEMO = REPO / "jobs" / "demo.toml"

MINIMAL = """
[job]
name = "t"
database = "sqlite:///db/t.sqlite"

[source]
file = "questions.jsonl"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_demo_job_file_is_valid_and_complete() -> None:
    spec = load_jobspec(DEMO)
    assert spec.name == "demo"
    assert spec.source_path == REPO / "jobs" / "demo_questions.jsonl"
    assert spec.database_url == f"sqlite+aiosqlite:///{REPO / 'var' / 'demo.sqlite'}"
    # "shows every key": every field of every section appears in the demo file.
    text = DEMO.read_text()
    for section in ("job", "source", "model", "grounding", "retrieval", "limits", "resolver"):
        for key in type(getattr(spec, section)).__struct_fields__:
            # a key unset by default (sampling: sent only when set) shows commented out
            shown = f"\n{key} =" in text or f"\n# {key} =" in text
            assert shown, f"[{section}] {key} missing from jobs/demo.toml"


def test_relative_paths_resolve_against_the_job_file(tmp_path: Path) -> None:
    spec = load_jobspec(write(tmp_path, MINIMAL))
    assert spec.source_path == tmp_path / "questions.jsonl"
    assert spec.database_url == f"sqlite+aiosqlite:///{tmp_path / 'db' / 't.sqlite'}"


def test_postgres_url_gets_the_async_driver(tmp_path: Path) -> None:
    spec = load_jobspec(
        write(tmp_path, MINIMAL), ['job.database="postgresql://u@127.0.0.1:5432/test"']
    )
    assert spec.database_url == "postgresql+asyncpg://u@127.0.0.1:5432/test"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("[limits]\nconcurrency = 0", "limits.concurrency"),
        ("[limits]\nrequests_per_minute = 'fast'", "limits.requests_per_minute"),
        ("[limits]\nconcurency = 4", "limits.concurency: unknown key"),
        ("[model]\nbackend = 'openai'", "model.backend"),
        ("[model]\nprompt_template = 'no placeholder'", "model.prompt_template"),
        ("[grounding]\ntool = 'vertex_ai_search'", "grounding.tool"),
        ("[surprise]\nx = 1", "surprise: unknown key"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path: Path, extra: str, needle: str) -> None:
    path = write(tmp_path, MINIMAL + extra)
    with pytest.raises(JobSpecError) as caught:
        load_jobspec(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert needle in str(caught.value)


@pytest.mark.parametrize(
    ("job_keys", "needle"),
    [
        ("fail_on = ['sources_gone']", "job.fail_on: 'sources_gone' is not a failure state"),
        ("fail_on_sources_lost = 1.5", "job.fail_on_sources_lost"),
    ],
)
def test_fail_on_names_states_and_lost_links_only(
    tmp_path: Path, job_keys: str, needle: str
) -> None:
    ok = write(tmp_path, MINIMAL.replace('name = "t"', 'name = "t"\nfail_on = ["sources_expired"]'))
    assert load_jobspec(ok).job.fail_on == ("sources_expired",)
    path = write(tmp_path, MINIMAL.replace('name = "t"', f'name = "t"\n{job_keys}'))
    with pytest.raises(JobSpecError) as caught:
        load_jobspec(path)
    assert needle in str(caught.value)


def test_missing_required_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[job]\nname = "t"\n')
    with pytest.raises(JobSpecError, match=r"source: required key is missing"):
        load_jobspec(path)


def test_broken_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[job\nname=")
    with pytest.raises(JobSpecError, match=r"not valid TOML"):
        load_jobspec(path)


def test_overrides_are_validated_like_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    spec = load_jobspec(path, ["limits.concurrency=3", "model.name=gemini-2.0-flash"])
    assert spec.limits.concurrency == 3
    assert spec.model.name == "gemini-2.0-flash"  # not TOML: taken as a plain string
    with pytest.raises(JobSpecError, match=r"limits.concurrency"):
        load_jobspec(path, ["limits.concurrency=-1"])
    with pytest.raises(JobSpecError, match=r"limits.nope: unknown key"):
        load_jobspec(path, ["limits.nope=1"])
    with pytest.raises(JobSpecError, match=r"expected section.key=value"):
        load_jobspec(path, ["concurrency=1"])


def test_cli_exits_2_with_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, MINIMAL + "[limits]\nmax_attempts = 0\n")
    assert main(["status", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "limits.max_attempts" in err
    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "no such job file" in capsys.readouterr().err


def test_the_resolver_is_sized_to_keep_up_with_the_answers(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    slow = load_jobspec(path, ["limits.requests_per_minute=60"]).resolver
    assert (slow.requests_per_second, slow.concurrency) == (20.0, 16)
    fast = load_jobspec(path, ["limits.requests_per_minute=30000"]).resolver
    assert fast.requests_per_second == 30000 / 60 * 8  # 8 lookups per answer a second
    assert fast.concurrency == 256
    fixed = load_jobspec(
        path, ["resolver.requests_per_second=5.0", "resolver.concurrency=2"]
    ).resolver
    assert (fixed.requests_per_second, fixed.concurrency) == (5.0, 2)
