"""The demo job (jobs/demo.toml: Gemini 3 with Search and URL context, call 2 on the demo
schema) run against the emulator over a few of its questions, for the export and API tests."""

from __future__ import annotations

from pathlib import Path

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.exit_codes import ExitStatus
from pipeline.job.spec import JobSpec, load_jobspec
from tests.support.paths import JOBS

DEMO_JOB = JOBS / "demo.toml"
DEMO_QUESTIONS = JOBS / "demo_questions.jsonl"


def demo_overrides(
    directory: Path, base_url: str, n_questions: int, *, name: str = "demo"
) -> list[str]:
    """``--set`` lines that run jobs/demo.toml's first ``n_questions`` against an emulator at
    ``base_url``, its database in ``directory``."""
    questions = directory / f"{name}-questions.jsonl"
    lines = DEMO_QUESTIONS.read_text(encoding="utf-8").splitlines()[:n_questions]
    questions.write_text("\n".join(lines) + "\n", encoding="utf-8")
    host = base_url.split("://", 1)[1]
    return [
        f'job.name="{name}"',
        f'job.database="sqlite:///{directory / "demo.sqlite"}"',
        f'source.file="{questions}"',
        f'model.base_url="{base_url}"',
        f'resolver.allow_hosts=["{host}"]',
    ]


async def run_demo_job(
    directory: Path, n_questions: int, *, name: str = "demo", seed: int = 7
) -> JobSpec:
    """jobs/demo.toml (Gemini 3 with Search and URL context, call 2 on the demo schema) over
    its first ``n_questions``, run against the emulator; the spec to read it back with."""
    with running_emulator(EmulatorConfig(seed=seed)) as emu:
        spec = load_jobspec(
            DEMO_JOB, demo_overrides(directory, emu.base_url, n_questions, name=name)
        )
        assert await run_command(spec) in (ExitStatus.OK, ExitStatus.SOME_FAILED)
    return spec
