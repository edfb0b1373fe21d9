"""What verification costs, end to end: ``ground estimate`` and ``run --dry-run`` show its
expected calls and cost (before any answer, then from the stored ones and the ledger), and
``ground verify`` makes no call for a question whose spend reached
``max_cost_per_question_usd``, and says so."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.maintain import estimate_command
from pipeline.commands.run import run_command
from pipeline.commands.verify import verify_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import load_jobspec
from pipeline.store.tables import calls
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = [pytest.mark.usefixtures("emulator_key"), pytest.mark.timeout(300)]

_VERIFY = ["verify.enabled=true", "verify.sample=0.5"]


def _line(out: str, start: str) -> str:
    return next(x for x in out.splitlines() if x.startswith(start))


@pytest.mark.anyio
async def test_estimate_and_dry_run_show_verification_and_the_cap_skips_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = EmulatorConfig(seed=3, ungrounded_share=0.0, unsupported_share=0.2)
    with running_emulator(config) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=30)
        spec = load_jobspec(tmp_path / "job.toml", _VERIFY)

        assert await estimate_command(spec) == 0
        before = capsys.readouterr().out
        first = _line(before, "verification ([verify] sample 0.5")
        assert "15 answers to check" in first and "an assumed answer" in first
        assert _line(before, "verification expected: $")
        assert "whole input window" in _line(before, "verification worst case")

        assert await run_command(spec, dry_run=True) == 0
        assert "15 answers to check" in _line(capsys.readouterr().out, "verification (")

        off = load_jobspec(tmp_path / "job.toml", [])
        assert await estimate_command(off) == 0
        assert "verification" not in capsys.readouterr().out

        assert await run_command(spec) == 0
        assert await estimate_command(spec) == 0
        stored = _line(capsys.readouterr().out, "verification (")
        assert "calls of the first 30 stored answers" in stored

        # Each question's spend from the run; the cap at the median of them.
        rows = await fetch_rows(
            spec.database_url, sa.select(calls.c.question_id, calls.c.cost_micro_usd)
        )
        spent: dict[int, int] = defaultdict(int)
        for r in rows:
            spent[r.question_id] += max(r.cost_micro_usd, 0)
        cap = sorted(spent.values())[len(spent) // 2]
        past = {q for q, s in spent.items() if s >= cap}
        assert 0 < len(past) < len(spent)
        capped = load_jobspec(
            tmp_path / "job.toml",
            [
                "verify.enabled=true",
                'verify.sample="all"',
                f"limits.max_cost_per_question_usd={cap / 1e6}",
            ],
        )
        capsys.readouterr()
        assert await verify_command(capped) == 0
        out = capsys.readouterr().out
        said = _line(out, f"verify: {len(past)} questions not checked")
        assert "limits.max_cost_per_question_usd" in said

    checked = await fetch_rows(
        spec.database_url, sa.select(calls.c.question_id).where(calls.c.step == "verify")
    )
    asked = {r.question_id for r in checked}
    assert asked and not asked & past  # no verification call for a question past its cap
    assert asked <= set(spent) - past

    # With the verification calls in the ledger, the estimate prices a call at their mean.
    assert await estimate_command(capped) == 0
    assert "verification calls in the ledger" in _line(capsys.readouterr().out, "verification (")
