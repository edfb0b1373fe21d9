"""A small real job, run once against the emulator, for the export / show / report tests."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec, load_jobspec
from pipeline.store.engine import create_engine
from pipeline.store.tables import answers, questions, sources
from tests.support.jobs import QUESTIONS, make_job
from tests.support.paths import DEMO_SCHEMA

SCHEMA = DEMO_SCHEMA
CLASSES = ("geo", "history", "science")
# Stored as an answer and a source title, to prove nothing from the model ever runs.
XSS_ANSWER = (
    ' Also: <script>document.title="pwned";window.pwned=1</script>'
    " <img src=x onerror=\"document.title='pwned';window.pwned=1\"> is big."
)
XSS_ID = "q00003"


def write_classified_questions(directory: Path, n: int) -> None:
    with (directory / "questions.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(n):
            text = f"{QUESTIONS[i % len(QUESTIONS)]} (#{i})"
            record = {"id": f"q{i:05d}", "question": text, "topic": CLASSES[i % len(CLASSES)]}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


async def run_results_job(directory: Path, n_questions: int = 24) -> JobSpec:
    """Run a job with structure enabled and classes; plant an XSS payload in one answer.

    The payload is appended to the stored answer, so its citations' offsets stay valid.
    """
    with running_emulator(EmulatorConfig(seed=5, ungrounded_share=0.2)) as emu:
        make_job(directory, base_url=emu.base_url, n_questions=n_questions)
        write_classified_questions(directory, n_questions)
        spec = load_jobspec(
            directory / "job.toml",
            [
                "source.class_field=topic",
                "structure.enabled=true",
                f'structure.schema="{SCHEMA}"',
            ],
        )
        assert await run_command(spec) == 0
    engine = create_engine(spec.database_url)
    try:
        async with engine.begin() as connection:
            qid = sa.select(questions.c.id).where(questions.c.qid == XSS_ID).scalar_subquery()
            planted = answers.c.text + XSS_ANSWER
            await connection.execute(
                answers.update().where(answers.c.question_id == qid).values(text=planted)
            )
            answer_id = sa.select(answers.c.id).where(answers.c.question_id == qid)
            await connection.execute(
                sources.update()
                .where(sources.c.answer_id.in_(answer_id))
                .values(title='<img src=x onerror="window.pwned=2">')
            )
    finally:
        await engine.dispose()
    return spec
