"""docs/guides/warehouses.md's DuckDB and Polars example, run as it is, in order, against the
emulator: DuckDB writes the question file, a Polars frame adds late rows, ``run_job`` answers
them all, and the answers go back into DuckDB as Arrow and out as a Polars frame."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import polars as pl
import pytest

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from tests.support.paths import REPO

RECIPE = REPO / "docs" / "guides" / "warehouses.md"
BLOCK = re.compile(r"```(python|toml)\n(.*?)```", re.DOTALL)
EARLY, LATE = 8, 4  # tickets opened before March 2026, and after


def example_blocks() -> list[tuple[str, str]]:
    """(language, code) of the worked example's blocks: its section only (the BigQuery and
    Spark sections need their clients)."""
    text = RECIPE.read_text(encoding="utf-8")
    section = text.split("## DuckDB and Polars", 1)[1].split("\n## ", 1)[0]
    return BLOCK.findall(section)


def make_warehouse(directory: Path) -> None:
    with duckdb.connect(str(directory / "warehouse.duckdb")) as connection:
        connection.sql(f"""
            CREATE TABLE tickets AS
            SELECT 'T' || lpad(i::VARCHAR, 3, '0') AS ticket_id,
                   'Why does the invoice export fail for account ' || i || '?' AS body,
                   CASE WHEN i % 2 = 0 THEN 'billing' ELSE 'api' END AS product,
                   CASE WHEN i < {EARLY} THEN DATE '2026-02-01' ELSE DATE '2026-03-02' END
                       + CAST(i AS INTEGER) AS opened
            FROM range({EARLY + LATE}) t(i)
        """)  # fmt: skip


def test_the_duckdb_and_polars_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, emulator_key: str
) -> None:
    blocks = example_blocks()
    [toml] = [code for language, code in blocks if language == "toml"]
    code = [code for language, code in blocks if language == "python"]
    assert len(code) >= 4
    make_warehouse(tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    with running_emulator(EmulatorConfig(seed=11)) as emu:
        host = emu.base_url.split("://", 1)[1]
        (tmp_path / "enrich.toml").write_text(
            toml + f'\n[model]\nbase_url = "{emu.base_url}"\n\n'
            f'[resolver]\nallow_hosts = ["{host}"]\nrequests_per_second = 1000.0\n',
            encoding="utf-8",
        )
        for block in code:
            exec(compile(block, str(RECIPE), "exec"), namespace)

    lines = (tmp_path / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == EARLY  # DuckDB's COPY: one JSON object a line
    assert namespace["loaded"].added == LATE
    outcome = namespace["outcome"]
    assert outcome.total == EARLY + LATE and outcome.calls >= EARLY + LATE
    warehouse = namespace["warehouse"]
    assert isinstance(warehouse, duckdb.DuckDBPyConnection)
    stored = warehouse.execute("SELECT count(*), count(answer) FROM ticket_answers").fetchone()
    assert stored is not None and stored[0] == EARLY + LATE and stored[1] > 0
    by_product = dict((p, n) for p, n, _ in namespace["by_product"])
    assert set(by_product) == {"api", "billing"}
    assert sum(by_product.values()) == outcome.counts["done"]
    frame = namespace["frame"]
    assert isinstance(frame, pl.DataFrame) and frame.height == EARLY + LATE
    assert set(frame["class"].cast(pl.String)) == {"api", "billing"}
    grounded = namespace["grounded"]
    assert isinstance(grounded, pl.DataFrame) and 0 < grounded.height <= EARLY + LATE
    warehouse.close()
