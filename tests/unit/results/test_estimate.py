"""``ground estimate`` before the first answer: call 1, plus call 2 when the job structures,
each at the rate it will be charged (the Batch API's for what goes as a batch)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from pipeline.commands.maintain import estimate_command, prices_for
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.results.estimate import JobPrices
from tests.support.jobs import make_job
from tests.support.paths import DEMO_SCHEMA

pytestmark = pytest.mark.anyio

SCHEMA = DEMO_SCHEMA
STRUCTURE = ["structure.enabled=true", f'structure.schema="{SCHEMA}"']
BATCH = ['model.mode="batch"']
UNREACHABLE = "http://127.0.0.1:1"  # estimate makes no call


def _table():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        return load_prices()


async def _figures(directory: Path, overrides: list[str], capsys) -> tuple[float, float, str]:
    """(expected, worst case) in dollars as `ground estimate` prints them, and its output."""
    spec = make_job(directory, base_url=UNREACHABLE, n_questions=10, overrides=overrides)
    capsys.readouterr()
    assert await estimate_command(spec) == 0
    out = capsys.readouterr().out

    def dollars(prefix: str) -> float:
        line = next(x for x in out.splitlines() if x.startswith(prefix))
        return float(line.split("$")[1].split(" ")[0].rstrip(")"))

    return dollars("expected: $"), dollars("worst case"), out


def _prices(directory: Path, overrides: list[str]) -> JobPrices:
    return prices_for(make_job(directory, base_url=UNREACHABLE, overrides=overrides), _table())


def test_call_2_is_priced_at_the_batch_rate_only_when_it_goes_as_a_batch(tmp_path: Path) -> None:
    table = _table()
    online = _prices(tmp_path / "a", STRUCTURE)
    batched = _prices(tmp_path / "b", [*STRUCTURE, *BATCH, "batch.structure=true"])
    call_2_online = _prices(tmp_path / "c", [*STRUCTURE, *BATCH, "batch.structure=false"])
    plain = _prices(tmp_path / "d", [])
    assert online.structures
    assert online.structure == table.for_model("gemini-3.8-flash", "developer")
    assert (
        batched.grounding == batched.structure == table.for_batch("gemini-3.8-flash", "developer")
    )
    assert call_2_online.grounding == batched.grounding
    assert call_2_online.structure == online.structure
    assert not plain.structures and plain.structure is None


async def test_a_structuring_job_is_estimated_with_its_second_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain, plain_worst, _ = await _figures(tmp_path / "plain", [], capsys)
    two_calls, two_calls_worst, out = await _figures(tmp_path / "two", STRUCTURE, capsys)
    assert "plus call 2" in out
    assert two_calls > plain and two_calls_worst > plain_worst
    single, single_worst, out = await _figures(
        tmp_path / "single", [*STRUCTURE, 'structure.mode="single"'], capsys
    )
    assert "call 2" not in out
    assert (single, single_worst) == (plain, plain_worst)


async def test_call_2_in_a_structure_batch_costs_less_than_online(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batch_online_2, _, _ = await _figures(
        tmp_path / "a", [*STRUCTURE, *BATCH, "batch.structure=false"], capsys
    )
    batch_batch_2, _, out = await _figures(
        tmp_path / "b", [*STRUCTURE, *BATCH, "batch.structure=true"], capsys
    )
    assert out.count("[batch]") >= 2  # both calls named at the batch rate
    assert batch_batch_2 < batch_online_2
