"""Building throw-away jobs for end-to-end tests against the emulator."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.job.spec import JobSpec, load_jobspec

QUESTIONS = [
    "What is the population of Kraków?",
    "Wie hoch ist der Mont Blanc — und wer bestieg ihn zuerst?",
    "東京タワーの高さは？",
    "Which emoji 🧑‍🚀 is used for astronauts?",
    "Qui a construit la tour Eiffel ?",
]


def write_questions(directory: Path, n: int) -> Path:
    path = directory / "questions.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            text = f"{QUESTIONS[i % len(QUESTIONS)]} (#{i})"
            handle.write(json.dumps({"id": f"q{i:05d}", "question": text}) + "\n")
    return path


def make_job(
    directory: Path,
    *,
    base_url: str,
    n_questions: int = 20,
    database: str | None = None,
    overrides: list[str] | None = None,
) -> JobSpec:
    """A job over ``n_questions`` generated questions, pointed at ``base_url``."""
    directory.mkdir(parents=True, exist_ok=True)
    write_questions(directory, n_questions)
    host = base_url.split("://", 1)[1]
    database = database or "sqlite:///job.sqlite"
    (directory / "job.toml").write_text(
        f"""
[job]
name = "test"
database = "{database}"

[source]
file = "questions.jsonl"

[model]
name = "gemini-3.8-flash"
base_url = "{base_url}"
request_timeout_s = 5.0

[limits]
requests_per_minute = 60000
concurrency = 8
max_attempts = 3

[resolver]
allow_hosts = ["{host}"]
requests_per_second = 1000.0
""",
        encoding="utf-8",
    )
    return load_jobspec(directory / "job.toml", overrides or [])


def generate_calls(stats: dict, model: str | None = None) -> int:
    """generateContent requests the emulator saw (Developer API), or those for ``model``."""
    if model is not None:
        return stats["requests"]["by_model"].get(model, 0)
    return stats["requests"]["by_kind"].get("developer", 0)
