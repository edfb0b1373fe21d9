"""Every export format round-trips the demo job's records, typed, and documented by
``ground export --schema``: JSONL against its JSON Schema, Parquet through pyarrow and DuckDB,
CSV against its column list, tables keyed by (job, id). The Search suggestions HTML comes out
byte for byte as it was stored, and version rows carry their own calls and cost."""

from __future__ import annotations

import csv
import datetime as dt
import functools
import json
import subprocess
import sys
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import duckdb
import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from pipeline.cli import main
from pipeline.commands.run import refresh_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec, load_jobspec
from pipeline.results import export
from pipeline.store import queue
from pipeline.store.engine import async_url, create_engine
from pipeline.store.records import Filters
from pipeline.store.tables import answers, questions
from pipeline.store.versions import LATEST_ANSWER
from tests.support.databases import POSTGRES_URL, fetch_rows, postgres_job_database
from tests.support.demo import DEMO_JOB, demo_overrides, run_demo_job
from tests.support.exports import as_json, read_jsonl, without_none
from tests.support.keys import TEST_API_KEY
from tests.support.waiting import wait_until

N = 30
PROCESS_TIMEOUT_S = 120  # seconds an export process may take to end, on a busy machine
REFRESHED = ("q0001", "q0002", "q0003")  # asked again: two answer versions each
PLANTED_ID = "q0004"
# Stored as one answer's Search suggestions: CRLF, quotes, a comma, a tab, non-ASCII, an emoji
# and trailing spaces, none of which any format may touch.
PLANTED_HTML = (
    '<style>.chip{color:#1a73e8}</style>\r\n<div class="chip" title="a, b">'
    'Kraków — "東京" 🧑‍🚀\t</div>\n  '
)


@dataclass(frozen=True)
class Demo:
    spec: JobSpec
    sets: list[str]  # the --set lines that reach the job's database
    before_refresh: dict[str, dict[str, Any]]  # each record before REFRESHED were asked again
    html: dict[str, str | None]  # id -> the stored search_entry_point_html (latest answer)


async def read_records(spec: JobSpec, *, all_versions: bool = False) -> list[dict[str, Any]]:
    engine = create_engine(spec.database_url)
    try:
        async with engine.connect() as connection:
            job_id = await queue.find_job(connection, spec.name)
        assert job_id is not None
        filters = Filters(all_versions=all_versions)
        return [r async for batch in export.record_batches(engine, job_id, filters) for r in batch]
    finally:
        await engine.dispose()


async def plant_html(spec: JobSpec) -> dict[str, str | None]:
    engine = create_engine(spec.database_url)
    try:
        async with engine.begin() as connection:
            question = sa.select(questions.c.id).where(questions.c.qid == PLANTED_ID)
            await connection.execute(
                answers.update()
                .where(answers.c.question_id == question.scalar_subquery(), LATEST_ANSWER)
                .values(search_entry_point_html=PLANTED_HTML)
            )
            rows = await connection.execute(
                sa.select(questions.c.qid, answers.c.search_entry_point_html)
                .join(answers, answers.c.question_id == questions.c.id)
                .where(LATEST_ANSWER)
            )
            return {qid: html for qid, html in rows}
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMINI_API_KEY", TEST_API_KEY)
        patch.delenv("GOOGLE_API_KEY", raising=False)
        directory = tmp_path_factory.mktemp("demo")
        spec = anyio.run(run_demo_job, directory, N)
        before = {r["id"]: r for r in anyio.run(read_records, spec)}
        with running_emulator(EmulatorConfig(seed=8)) as emu:  # other answers this time
            sets = demo_overrides(directory, emu.base_url, N)
            spec = load_jobspec(DEMO_JOB, sets)
            ids = directory / "refresh.txt"
            ids.write_text("\n".join(REFRESHED) + "\n", encoding="utf-8")
            refresh = functools.partial(
                refresh_command, spec, older_than=dt.timedelta(0), ids_file=str(ids)
            )
            assert anyio.run(refresh) in (0, 3)
        html = anyio.run(plant_html, spec)
        yield Demo(spec, sets, before, html)


def ground(demo: Demo, command: str, *args: str) -> int:
    sets = [part for line in demo.sets for part in ("--set", line)]
    return main([command, str(DEMO_JOB), *sets, *args])


def printed_schema(demo: Demo, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    assert ground(demo, "export", "--schema", *args) == 0
    return capsys.readouterr().out


def exported(demo: Demo, path: Path, *args: str) -> Path:
    assert ground(demo, "export", "--out", str(path), *args) == 0
    return path


@pytest.mark.parametrize("versions", [False, True])
def test_jsonl_validates_against_the_schema_export_prints(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str], versions: bool
) -> None:
    flags = ("--all-versions",) if versions else ()
    schema = json.loads(printed_schema(demo, capsys, "--format", "jsonl", *flags))
    assert schema["$defs"]["job_schema"]["title"] == "City population answer"
    jsonschema.Draft202012Validator.check_schema(schema)
    check = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    records = read_jsonl(exported(demo, tmp_path / "out.jsonl", *flags))
    assert len(records) == N + (len(REFRESHED) if versions else 0)
    for record in records:
        check.validate(record)
        dt.datetime.fromisoformat(record["updated_at"])
    # The demo's answers (Gemini 3 with Search and URL context, per the emulator) carry what
    # the exports used to leave out.
    assert all(r["tool_part_kinds"] == ["toolCall", "toolResponse"] for r in records)
    assert all(r["url_context_statuses"] for r in records)
    assert all(s["kind"] == "web" for r in records for s in r["sources"] if s["uri"])
    # The embedded job schema is enforced where the stored object passed it.
    made = next(r for r in records if r["structured_valid"])
    assert not check.is_valid({**made, "structured": {**made["structured"], "city": 7}})


def test_version_rows_carry_their_own_calls_and_cost(demo: Demo, tmp_path: Path) -> None:
    latest = {r["id"]: r for r in read_jsonl(exported(demo, tmp_path / "l.jsonl"))}
    versions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in read_jsonl(exported(demo, tmp_path / "v.jsonl", "--all-versions")):
        versions[r["id"]].append(r)
    ledger = ("calls", "input_tokens", "output_tokens", "grounding_units")
    for qid, rows in versions.items():
        total = latest[qid]
        for key in ledger:
            assert sum(r[key] for r in rows) == total[key], (qid, key)
        assert sum(r["cost_usd"] for r in rows) == pytest.approx(total["cost_usd"])
        if qid not in REFRESHED:
            assert len(rows) == 1
            continue
        first, second = rows
        assert (first["answer_version"], second["answer_version"]) == (1, 2)
        before = demo.before_refresh[qid]  # version 1 costs what the question cost then
        assert [first[k] for k in (*ledger, "cost_usd")] == [
            before[k] for k in (*ledger, "cost_usd")
        ]
        assert second["calls"] >= 2 and second["cost_usd"] > 0  # call 1 and call 2, again
        assert first["calls"] + second["calls"] == total["calls"] > second["calls"]


def test_parquet_reads_back_typed_with_pyarrow_and_duckdb(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read_jsonl(exported(demo, tmp_path / "p.jsonl"))
    path = exported(demo, tmp_path / "p.parquet")
    table = pq.read_table(path)
    schema = table.schema
    assert printed_schema(demo, capsys, "--format", "parquet").strip() == schema.to_string(
        show_field_metadata=False, show_schema_metadata=False
    )
    assert schema.field("answered_at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("state").type == pa.dictionary(pa.int32(), pa.string())
    assert schema.field("calls").type == pa.int64() and not schema.field("calls").nullable
    assert schema.field("grounded").type == pa.bool_()
    structured = schema.field("structured").type
    assert structured.field("population").type == pa.int64()
    assert structured.field("facts").type.value_type.field("number").type == pa.float64()
    assert schema.field("sources").type.value_type.field("resolved_at").type == pa.timestamp(
        "us", tz="UTC"
    )
    assert schema.field("metadata_json").type == pa.string()
    rows = [as_json(row) for row in table.to_pylist()]
    assert len(rows) == len(records) == N
    for row, record in zip(rows, records, strict=True):
        assert without_none(row.pop("structured")) == without_none(record["structured"])
        assert row == {k: v for k, v in record.items() if k != "structured"}

    con = duckdb.connect()
    described = {
        name: kind
        for name, kind, *_ in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')")
        .fetchall()
    }  # fmt: skip
    assert described["answered_at"] == "TIMESTAMP WITH TIME ZONE"
    assert described["calls"] == "BIGINT" and described["grounded"] == "BOOLEAN"
    assert described["structured"].startswith("STRUCT(city VARCHAR")
    assert "resolved_at TIMESTAMP WITH TIME ZONE" in described["sources"]
    found = con.execute(
        f"SELECT id, structured.population, epoch_us(answered_at) FROM read_parquet('{path}')"
        " WHERE state = 'done' ORDER BY id"
    ).fetchall()
    expected = [
        (
            r["id"],
            r["structured"]["population"] if r["structured"] else None,
            int(dt.datetime.fromisoformat(r["answered_at"]).timestamp() * 1_000_000),
        )
        for r in records
        if r["state"] == "done"
    ]
    assert [(i, p) for i, p, _ in found] == [(i, p) for i, p, _ in expected]
    assert all(abs(a - b) <= 1 for (_, _, a), (_, _, b) in zip(found, expected, strict=True))

    versions = pq.read_table(exported(demo, tmp_path / "v.parquet", "--all-versions"))
    assert versions.num_rows == N + len(REFRESHED)
    assert versions.schema.field("answer_superseded_at").type == pa.timestamp("us", tz="UTC")


def test_csv_has_the_columns_its_schema_lists(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for long in (None, "sources", "citations"):
        flags = ("--long", long) if long else ()
        columns = json.loads(printed_schema(demo, capsys, "--format", "csv", *flags))[
            "tableSchema"
        ]["columns"]
        path = exported(demo, tmp_path / f"{long}.csv", "--format", "csv", *flags)
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            assert reader.fieldnames == [c["name"] for c in columns]
            rows = list(reader)
        assert rows
        required = [c["name"] for c in columns if c["required"]]
        assert all(row[name] != "" for row in rows for name in required)
        kinds = {c["name"]: c["datatype"] for c in columns}
        for row in rows:
            for name, kind in kinds.items():
                if row[name] and kind == "json":
                    json.loads(row[name])
                if row[name] and kind == "datetime":
                    assert dt.datetime.fromisoformat(row[name]).utcoffset() == dt.timedelta(0)


def test_the_search_suggestions_html_is_byte_identical_in_every_export(
    demo: Demo, tmp_path: Path
) -> None:
    stored = demo.html
    assert stored[PLANTED_ID] == PLANTED_HTML
    assert sum(html is not None for html in stored.values()) == N  # every answer carried one

    def check(found: dict[str, str | None]) -> None:
        assert found.keys() == stored.keys()
        for qid, html in found.items():
            assert (html or "").encode() == (stored[qid] or "").encode(), qid

    jsonl = read_jsonl(exported(demo, tmp_path / "h.jsonl"))
    check({r["id"]: r["search_entry_point_html"] for r in jsonl})
    with exported(demo, tmp_path / "h.csv", "--format", "csv").open(
        newline="", encoding="utf-8"
    ) as handle:
        check({r["id"]: r["search_entry_point_html"] for r in csv.DictReader(handle)})
    table = pq.read_table(exported(demo, tmp_path / "h.parquet"))
    ids, html = table["id"].to_pylist(), table["search_entry_point_html"].to_pylist()
    check(dict(zip(ids, html, strict=True)))
    target = f"sqlite:///{tmp_path / 'kb.sqlite'}"
    assert ground(demo, "export", "--to", target, "--table", "kb") == 0
    rows = anyio.run(
        fetch_rows,
        f"sqlite+aiosqlite:///{tmp_path / 'kb.sqlite'}",
        sa.select(sa.text("id, search_entry_point_html FROM kb")),
    )
    check({qid: html for qid, html in rows})


@pytest.mark.postgres
def test_two_jobs_share_a_postgres_table_and_both_keep_their_rows(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str], emulator_key: str
) -> None:
    other = anyio.run(functools.partial(run_demo_job, tmp_path, 10, name="demo-b", seed=9))
    name = f"kb_{uuid.uuid4().hex[:10]}"
    old = f"old_{uuid.uuid4().hex[:10]}"
    target = POSTGRES_URL
    try:
        capsys.readouterr()
        assert ground(demo, "export", "--to", target, "--table", name) == 0
        assert main(["export", str(DEMO_JOB), *_sets(other), "--to", target, "--table", name]) == 0
        assert ground(demo, "export", "--to", target, "--table", name) == 0  # again: upserts
        out = capsys.readouterr().out
        assert f"upserted {N} questions of job 'demo' into table '{name}'" in out
        assert f"upserted 10 questions of job 'demo-b' into table '{name}'" in out

        table = sa.table(
            name,
            *(sa.column(c) for c in ("job", "id", "answer", "search_entry_point_html", "sources")),
        )
        rows = anyio.run(fetch_rows, target, sa.select(table).order_by(table.c.job, table.c.id))
        mine = {r.id: r for r in rows if r.job == "demo"}
        theirs = {r.id: r for r in rows if r.job == "demo-b"}
        assert len(rows) == N + 10 and len(mine) == N and len(theirs) == 10
        expected = {r["id"]: r for r in anyio.run(read_records, demo.spec)}
        expected_b = {r["id"]: r for r in anyio.run(read_records, other)}
        assert {q: r.answer for q, r in mine.items()} == {
            q: r["answer"] for q, r in expected.items()
        }
        assert {q: r.answer for q, r in theirs.items()} == {
            q: r["answer"] for q, r in expected_b.items()
        }
        assert set(theirs) < set(mine)  # the same ids, and neither job overwrote the other
        assert mine[PLANTED_ID].search_entry_point_html.encode() == PLANTED_HTML.encode()
        assert mine["q0005"].sources[0]["resolved_at"]  # jsonb, decoded

        columns = anyio.run(
            fetch_rows,
            target,
            sa.select(sa.text("column_name, data_type FROM information_schema.columns")).where(
                sa.text(f"table_name = '{name}'")
            ),
        )
        types = dict(columns)
        assert types["answered_at"] == "timestamp with time zone"
        assert types["sources"] == types["structured"] == types["metadata"] == "jsonb"
        assert types["calls"] == "bigint"

        # A table an older ground made (keyed by id alone) is refused, and left as it was.
        engine = create_engine(target)

        async def make_old() -> None:
            async with engine.begin() as connection:
                await connection.execute(
                    sa.text(f'CREATE TABLE "{old}" (id VARCHAR PRIMARY KEY, answer TEXT)')
                )
                await connection.execute(sa.text(f"INSERT INTO \"{old}\" VALUES ('q0001', 'x')"))
            await engine.dispose()

        anyio.run(make_old)
        assert ground(demo, "export", "--to", target, "--table", old) == 1
        err = capsys.readouterr().err
        assert "exists with another shape (keyed by id, no job column" in err
        assert "Nothing was changed" in err
        kept = anyio.run(fetch_rows, target, sa.select(sa.text(f'* FROM "{old}"')))
        assert [tuple(r) for r in kept] == [("q0001", "x")]
    finally:
        engine = create_engine(target)

        async def drop() -> None:
            async with engine.begin() as connection:
                for table_name in (name, old):
                    await connection.execute(sa.text(f'DROP TABLE IF EXISTS "{table_name}"'))
            await engine.dispose()

        anyio.run(drop)


@pytest.mark.postgres
def test_three_exports_started_together_create_one_new_postgres_table(
    demo: Demo, emulator_key: str
) -> None:
    """Three ``export --to`` into one table that does not exist yet all succeed. A fourth
    creator (this test, in a transaction it rolls back) holds the name until all three have
    reached the creation, so they do meet there, however the machine schedules them."""
    name = "kb_new"
    with postgres_job_database() as target:
        holding, release = threading.Event(), threading.Event()

        async def hold_the_name() -> None:
            engine = create_engine(async_url(target))
            try:
                async with engine.connect() as connection:
                    await connection.execute(sa.text(f'CREATE TABLE "{name}" (x integer)'))
                    holding.set()
                    await anyio.to_thread.run_sync(release.wait)
                    await connection.rollback()
            finally:
                await engine.dispose()

        holder = threading.Thread(target=anyio.run, args=(hold_the_name,))
        holder.start()
        children: list[subprocess.Popen[bytes]] = []
        try:
            wait_until(holding.is_set, "the test's own CREATE TABLE")
            sets = [part for line in demo.sets for part in ("--set", line)]
            command = [sys.executable, "-m", "pipeline.cli", "export", str(DEMO_JOB), *sets]
            children = [
                subprocess.Popen(
                    [*command, "--to", target, "--table", name],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                for _ in range(3)
            ]

            def waiting_on_locks() -> bool:
                statement = sa.select(sa.func.count()).where(
                    sa.text("datname = current_database() AND wait_event_type = 'Lock'")
                )
                rows = anyio.run(
                    fetch_rows,
                    async_url(target),
                    statement.select_from(sa.text("pg_stat_activity")),
                )
                return rows[0][0] >= len(children)

            def one_ended() -> str | None:
                ended = [c.returncode for c in children if c.poll() is not None]
                return f"an export ended first, with status {ended[0]}" if ended else None

            wait_until(
                waiting_on_locks,
                "three exports waiting to create the table",
                poll=0.1,
                abort=one_ended,
            )
        finally:
            release.set()
            holder.join()
        outcomes = [(c.communicate(timeout=PROCESS_TIMEOUT_S), c.returncode) for c in children]
        for (out, err), status in outcomes:
            assert status == 0, err.decode()
            assert f"upserted {N} questions of job 'demo' into table '{name}'" in out.decode()
        table = sa.table(name, sa.column("job"), sa.column("id"), sa.column("answer"))
        rows = anyio.run(fetch_rows, async_url(target), sa.select(table))
    expected = {r["id"]: r["answer"] for r in anyio.run(read_records, demo.spec)}
    assert sorted((r.job, r.id) for r in rows) == sorted(("demo", qid) for qid in expected)
    assert {r.id: r.answer for r in rows} == expected


def _sets(spec: JobSpec) -> list[str]:
    """--set lines that reach ``spec``'s job (its name and database) from jobs/demo.toml."""
    database = spec.database_url.replace("sqlite+aiosqlite:", "sqlite:")
    return ["--set", f'job.name="{spec.name}"', "--set", f'job.database="{database}"']


def test_the_schema_is_printed_without_opening_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = f'job.database="sqlite:///{tmp_path / "never" / "made.sqlite"}"'
    job = [str(DEMO_JOB), "--set", nowhere]
    assert main(["export", *job, "--schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "ground export record"
    target = ["--to", "postgresql://kb@db/kb", "--table", "answers"]
    assert main(["export", *job, "--schema", *target]) == 0
    ddl = capsys.readouterr().out
    assert "CREATE TABLE answers" in ddl and "PRIMARY KEY (job, id)" in ddl
    assert "answered_at TIMESTAMP WITH TIME ZONE" in ddl and "sources JSONB" in ddl
    assert main(["export", *job, "--schema", "--out", str(tmp_path / "s.json")]) == 2
    assert "--schema prints to stdout" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()
