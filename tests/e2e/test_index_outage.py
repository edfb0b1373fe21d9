"""``ground index`` across a PostgreSQL restart: waited out like a run's outage, every document
indexed once, no traceback.

The restart is of a cluster of the test's own (tests/support/pgcluster.py). So that it comes
while the index is in the middle of a transaction, whatever the machine's speed, the test
holds a lock on ``documents`` from a second session and restarts the server only once the
index's session is seen waiting on that lock (``pg_stat_activity``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from pipeline.store.tables import chunks, documents
from tests.support.databases import fetch_rows
from tests.support.pgcluster import private_cluster
from tests.support.waiting import DEADLINE_S, POLL_S, NeverHappened

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600), pytest.mark.postgres]

N_DOCS = 3_000


def _job(tmp_path: Path, database: str) -> Path:
    with (tmp_path / "docs.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(N_DOCS):
            text = f"Document {i} about the airport of city {i % 50}. " * 6
            handle.write(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": text}) + "\n")
    (tmp_path / "q.jsonl").write_text('{"id": "1", "question": "x"}\n', "utf-8")
    job = tmp_path / "job.toml"
    job.write_text(
        f'[job]\nname = "idx"\ndatabase = "{database}"\n[source]\nfile = "q.jsonl"\n'
        '[retrieval]\ndocs = "docs.jsonl"\nchunk_chars = 120\nchunk_overlap = 0\n',
        "utf-8",
    )
    return job


async def _poll(connection: AsyncConnection, query: str, what: str) -> None:
    """Until ``query`` (run on ``connection``) gives a row."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        # In a transaction, pg_stat_activity is a snapshot taken once: taken afresh each look.
        await connection.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        if (await connection.execute(sa.text(query))).first() is not None:
            return
        if time.monotonic() > deadline:
            raise NeverHappened(f"{what} did not happen within {DEADLINE_S:.0f} s")
        await anyio.sleep(POLL_S)


async def test_ground_index_across_a_postgres_restart_indexes_every_document_once(
    tmp_path: Path,
) -> None:
    with private_cluster() as cluster:
        job = _job(tmp_path, cluster.url.replace("+asyncpg", ""))
        log = tmp_path / "index.log"
        with log.open("wb") as stderr:
            child = subprocess.Popen(
                [sys.executable, "-m", "pipeline.cli", "index", str(job)],
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=dict(os.environ),
            )
        locker = create_async_engine(cluster.url)
        connection = await locker.connect()
        try:
            await _poll(
                connection,
                "SELECT 1 FROM pg_class WHERE relname = 'documents'",
                "the schema migrated",
            )
            await _poll(
                connection,
                "SELECT 1 FROM documents HAVING count(*) > 0",
                "the first documents committed",
            )
            await connection.execute(sa.text("SET lock_timeout = 0"))
            await connection.execute(sa.text("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE"))
            await _poll(
                connection,
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND pid <> pg_backend_pid()",
                "the index waiting on the lock",
            )
            # Restarted mid-transaction: every connection cut (the lock's too).
            await anyio.to_thread.run_sync(cluster.stop)
            await anyio.to_thread.run_sync(cluster.start)
        finally:
            with contextlib.suppress(Exception):  # cut by the restart
                await connection.invalidate()
            await locker.dispose()
        try:
            out, _ = child.communicate(timeout=300)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        stderr_text = log.read_text()
        assert child.returncode == 0, stderr_text
        assert "Traceback" not in stderr_text
        assert f"indexed {N_DOCS} documents" in out.decode()
        count = sa.select(sa.func.count()).select_from(documents)
        assert (await fetch_rows(cluster.url, count))[0][0] == N_DOCS
        dupes = (
            sa.select(chunks.c.document_id, chunks.c.ordinal)
            .group_by(chunks.c.document_id, chunks.c.ordinal)
            .having(sa.func.count() > 1)
        )
        assert await fetch_rows(cluster.url, dupes) == []
