"""``[limits] max_cost_per_question_usd`` in a run against the emulator: a question past its cap
is not nudged, says why, and the run summary counts it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import calls, questions
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio


async def test_questions_past_their_cap_are_not_nudged_and_the_summary_says_so(
    tmp_path: Path, emulator_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=71, ungrounded_share=1.0)) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=4,
            overrides=[
                "grounding.required=true",
                "grounding.ungrounded_retries=2",
                "limits.max_cost_per_question_usd=0.000001",  # one micro-dollar: the first call
            ],
        )
        capsys.readouterr()
        await run_command(spec)
        captured = capsys.readouterr()
    q = questions.c
    rows = await fetch_rows(
        spec.database_url, sa.select(q.id, q.state, q.error_class, q.last_error)
    )
    assert len(rows) == 4
    for _, state, error_class, last_error in rows:
        assert (state, error_class) == ("ungrounded", "cost_cap")
        assert "limits.max_cost_per_question_usd ($0.000001): no nudge" in last_error
    # One call each: without the cap each would have been nudged twice.
    per_question = Counter(
        qid for (qid,) in await fetch_rows(spec.database_url, sa.select(calls.c.question_id))
    )
    assert sorted(per_question.values()) == [1, 1, 1, 1]
    assert "4 questions reached limits.max_cost_per_question_usd" in captured.out + captured.err
