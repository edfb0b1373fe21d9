"""A job's prices file is read whole when the job loads: one that is not TOML, or not a valid
price table, is refused in one line naming it, exit 2, before any work (and not found by the
first call of a run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import cli
from tests.support.jobs import make_job

PRICE_ROW = """
[[price]]
match = "gemini-3.8-flash"
backend = "developer"
input_per_1m = 0.30
output_per_1m = 2.50
as_of = 2026-04-13
source = "our contract"
"""


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.strip()]
    return line


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[price]\nmatch = ", "not valid TOML: "),
        ("# nothing priced\n", "no [[price]] rows"),
        (PRICE_ROW.replace("0.30", '"cheap"'), "price[0].input_per_1m"),
    ],
    ids=["not-toml", "no-rows", "bad-value"],
)
def test_a_bad_prices_file_is_refused_at_load_naming_it(
    tmp_path: Path, text: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=3)
    prices = tmp_path / "prices.toml"
    prices.write_text(text, encoding="utf-8")
    job = str(tmp_path / "job.toml")
    for command in (["run", job], ["load", job], ["estimate", job]):
        assert cli.main([*command, "--set", 'limits.prices_file="prices.toml"']) == 2
        line = _one_line(capsys.readouterr().err)
        assert line.startswith(f"ground: {job}: limits.prices_file: {prices}: "), line
        assert problem in line, line
    assert not (tmp_path / "job.sqlite").exists()  # refused before any work


def test_a_good_prices_file_is_found_beside_the_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=3)
    (tmp_path / "prices.toml").write_text(PRICE_ROW, encoding="utf-8")
    job = str(tmp_path / "job.toml")
    assert cli.main(["load", job, "--set", 'limits.prices_file="prices.toml"']) == 0
    missing = ["load", job, "--set", 'limits.prices_file="nope.toml"']
    assert cli.main(missing) == 2
    assert "nope.toml" in _one_line(capsys.readouterr().err)
