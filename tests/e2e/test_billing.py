"""The money as Google bills it, end to end against the emulator: labels on Vertex bodies,
the emulator's billing export with hidden billed queries, ``ground reconcile`` and the
budget that learns from it, on SQLite and PostgreSQL (what docs/guides/costs.md shows: its
``ground reconcile`` block runs here as ``reconcile_command``, on JSONL, CSV and Parquet)."""

from __future__ import annotations

import csv
import json
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.forecast import pilot_forecast_command
from pipeline.commands.maintain import estimate_command
from pipeline.commands.reconcile import reconcile_command
from pipeline.commands.results import report_command, status_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import answers, billing_factors, calls, questions
from pipeline.store.trial import Trial
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.jobs import make_job
from tests.support.vertex import VERTEX, service_account_file

pytestmark = pytest.mark.anyio

MODEL = "gemini-3.5-flash"
PRICES = """
[[price]]
match = "gemini-3.5-flash"
backend = "any"
input_per_1m = 1.50
output_per_1m = 9.00
as_of = 2026-10-07
source = "the Developer API's row, for the tests"
[price.grounding.google_search]
kind = "per_query"
usd_per_1k = 14
source = "the Developer API's row, for the tests"
"""


CSV_COLUMNS = [
    "service.description",
    "sku.description",
    "usage_start_time",
    "usage_end_time",
    "project.id",
    "labels",
    "cost",
    "currency",
    "usage.amount",
    "usage.unit",
    "credits",
]


def _export(base_url: str) -> bytes:
    with urllib.request.urlopen(f"{base_url}/emulator/billing-export") as resp:
        return resp.read()


def _rows(data: bytes) -> list[dict]:
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


def _total(rows: list[dict], job: str = "test") -> Decimal:
    return sum(
        (
            Decimal(str(r["cost"]))
            for r in rows
            if {"key": "ground_job", "value": job} in r["labels"]
        ),
        Decimal(0),
    )


def _as_csv(rows: list[dict], path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for r in rows:
            writer.writerow(
                [
                    r["service"]["description"],
                    r["sku"]["description"],
                    r["usage_start_time"],
                    r["usage_end_time"],
                    r["project"]["id"],
                    json.dumps(r["labels"]),
                    repr(r["cost"]),
                    r["currency"],
                    repr(r["usage"]["amount"]),
                    r["usage"]["unit"],
                    json.dumps(r["credits"]),
                ]
            )
    return path


def _as_parquet(rows: list[dict], directory: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = directory / "billing.parquet"
    flat = [{**r, "credits": None, "labels": r["labels"] or None} for r in rows]
    pq.write_table(pa.Table.from_pylist(flat), path)
    return path


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest):
    if request.param == "sqlite":
        yield None
    else:
        with postgres_job_database() as url:
            yield url


def _job(directory: Path, base_url: str, database: str | None, extra: list[str]):
    prices = directory.parent / "prices.toml"
    if not prices.exists():
        prices.write_text(PRICES, encoding="utf-8")
    return make_job(
        directory,
        base_url=base_url,
        n_questions=40,
        database=database,
        overrides=[
            *VERTEX,
            f'model.name="{MODEL}"',
            f'limits.prices_file="{prices}"',
            'job.labels={team = "data-eng"}',
            *extra,
        ],
    )


async def test_reconcile_learns_the_hidden_queries_and_the_budget_stops_before_the_bill(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    database: str | None,
) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES, encoding="utf-8")
    config = EmulatorConfig(
        seed=51, ungrounded_share=0.0, billed_query_fanout=3, billing_prices_file=str(prices)
    )
    with running_emulator(config) as emu:
        key = service_account_file(tmp_path, f"{emu.base_url}/token")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
        first = _job(tmp_path / "job", emu.base_url, database, ["limits.max_attempts=3"])
        assert await run_command(first, trial=Trial(limit=20)) == 0
        export = tmp_path / "billing.jsonl"
        export.write_bytes(_export(emu.base_url))
        rows = _rows(export.read_bytes())
        assert rows and all({"key": "team", "value": "data-eng"} in r["labels"] for r in rows), (
            "every row carries the job's own label"
        )
        steps = {p["value"] for r in rows for p in r["labels"] if p["key"] == "ground_step"}
        assert steps == {"ground"}
        listed = await fetch_rows(first.database_url, sa.select(answers.c.web_search_queries))
        assert len(listed) == 20 and all(len(q) <= 1 for (q,) in listed)
        assert any(len(q) == 0 for (q,) in listed) and any(len(q) == 1 for (q,) in listed)
        capsys.readouterr()
        assert await status_command(first, as_json=False) == 0
        said = capsys.readouterr().out
        assert "grounded responses listing no search query:" in said and "ledger may be low" in said
        billed = _total(rows)
        spent = await fetch_rows(first.database_url, sa.select(sa.func.sum(calls.c.cost_micro_usd)))
        ledger = Decimal(spent[0][0]) / 1_000_000
        assert ledger < billed * Decimal("0.97"), "the responses hid billed queries"

        capsys.readouterr()
        assert await reconcile_command(first, str(export), as_json=True) == 0
        document = json.loads(capsys.readouterr().out)
        reconciled = Decimal(document["billed_usd"])
        assert abs(reconciled - billed) <= billed * Decimal("0.03")
        assert document["matched_by"] == "labels"
        assert document["billed_queries_per_grounded_request"] == pytest.approx(3.0)
        factors = await fetch_rows(
            first.database_url,
            sa.select(billing_factors.c.model, billing_factors.c.queries_per_request),
        )
        assert [(m, round(f, 3)) for m, f in factors] == [(MODEL, 3.0)]

        assert await status_command(first, as_json=True) == 0
        shown = json.loads(capsys.readouterr().out)["billing"]
        assert Decimal(shown["reconciled_usd"]) == reconciled.quantize(Decimal("0.000001"))
        assert shown["reconciled_at"] and shown["billed_queries_per_grounded_request"] == 3.0

        # The same export as CSV (BigQuery's download: flattened, lists as JSON) and Parquet.
        for other in (_as_csv(rows, tmp_path / "billing.csv"), _as_parquet(rows, tmp_path)):
            assert await reconcile_command(first, str(other), as_json=True) == 0
            assert json.loads(capsys.readouterr().out)["billed_usd"] == document["billed_usd"]
        page = tmp_path / "report.html"
        assert await report_command(first, str(page)) == 0
        html = page.read_text(encoding="utf-8")
        assert "The ledger and the bill" in html and "reconciled bill (USD)" in html
        assert f"${reconciled:.4f}" in html
        assert await estimate_command(first) == 0
        assert "the reconciled bill showed beyond the ledger" in capsys.readouterr().out

        # A budget between what the ledger would say and what Google bills for the rest.
        per_question = billed / 20
        budget = billed + per_question * 10
        second = _job(
            tmp_path / "job",
            emu.base_url,
            database,
            [f"limits.budget_usd={budget:.6f}"],
        )
        assert await run_command(second) == 1  # the budget stops it early
        after = _total(_rows(_export(emu.base_url)))
        assert after <= budget, (after, budget)
        assert after > billed  # it did spend some of it
        print(f"ledger {ledger:.6f} bill {billed:.6f} reconciled {reconciled:.6f}")
        print(f"budget {budget:.6f} bill after the second run {after:.6f}")


async def test_the_developer_api_refuses_labels_and_its_export_rows_carry_none(
    tmp_path: Path, emulator_key: str
) -> None:
    with running_emulator(EmulatorConfig(seed=52, ungrounded_share=0.0)) as emu:
        body = orjson.dumps(
            {"contents": [{"parts": [{"text": "q"}]}], "labels": {"ground_job": "x"}}
        )
        request = urllib.request.Request(
            f"{emu.base_url}/v1beta/models/{MODEL}:generateContent",
            data=body,
            headers={"x-goog-api-key": emu.api_key, "content-type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request)
        assert refused.value.code == 400
        assert b'Unknown name \\"labels\\"' in refused.value.read()
        job = make_job(tmp_path / "dev", base_url=emu.base_url, n_questions=3)
        assert await run_command(job) == 0
        rows = _rows(_export(emu.base_url))
    assert rows and all(r["labels"] == [] for r in rows)
    assert {r["service"]["description"] for r in rows} == {"Gemini API"}


async def test_a_vertex_dry_run_shows_the_labels_each_request_carries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=53)) as emu:
        key = service_account_file(tmp_path, f"{emu.base_url}/token")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
        job = _job(tmp_path / "job", emu.base_url, None, [])
        capsys.readouterr()
        assert await run_command(job, dry_run=True) == 0
        assert emu.stats()["requests"]["total"] == 0
    out = capsys.readouterr().out
    first = out.split("request 1: question q00000\n", 1)[1].split("\nrequest 2:", 1)[0]
    assert orjson.loads(first)["labels"] == {
        "team": "data-eng",
        "ground_job": "test",
        "ground_run": "dry-run",
        "ground_step": "ground",
    }


async def test_a_pilot_asks_a_stratified_sample_for_real_and_forecasts_the_job(
    tmp_path: Path,
    emulator_key: str,
    capsys: pytest.CaptureFixture[str],
    database: str | None,
) -> None:
    directory = tmp_path / "pilot"
    directory.mkdir()
    with running_emulator(EmulatorConfig(seed=54, ungrounded_share=0.0)) as emu:
        job = make_job(
            directory,
            base_url=emu.base_url,
            n_questions=40,
            database=database,
            overrides=['source.class_field="kind"', f'model.name="{MODEL}"'],
        )
        rows = [orjson.loads(line) for line in job.source_path.read_bytes().splitlines()]
        with job.source_path.open("wb") as handle:
            for i, row in enumerate(rows):
                handle.write(orjson.dumps({**row, "kind": "ab"[i % 4 == 0]}) + b"\n")
        capsys.readouterr()
        assert await pilot_forecast_command(job, 8, seed=5, as_json=True) == 0
        document = json.loads(capsys.readouterr().out)
        asked = emu.stats()["requests"]["total"]
        # Asked again with the same seed: the same pilot, already answered, asks nothing.
        assert await pilot_forecast_command(job, 8, seed=5, as_json=True) == 0
        assert emu.stats()["requests"]["total"] == asked
    assert document["pilot_questions"] == 8 and document["remaining_questions"] == 32
    cost = document["cost_usd"]
    assert 0 < cost["p10"] <= cost["p50"] <= cost["p90"]
    duration = document["duration_s"]
    assert 0 <= duration["p10"] <= duration["p50"] <= duration["p90"]
    finished = await fetch_rows(
        job.database_url,
        sa.select(questions.c.qclass, sa.func.count())
        .where(questions.c.state == "done")
        .group_by(questions.c.qclass),
    )
    assert dict(finished) == {"a": 6, "b": 2}  # 30 and 10 questions: 3 to 1
