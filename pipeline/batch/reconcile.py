"""Reconciling a stored batch with its stats: rows that came back in no output line.

A batch that ended ``SUCCEEDED`` (or, on Vertex, ``PARTIALLY_SUCCEEDED``) says it processed
every row; its stats count the failed ones (``batchStats.failedRequestCount``,
``completionStats.failedCount``). A failed row is normally a line with an error status, which
the verdicts judge under the retry policy. But a row the stats count can also be absent from
the output altogether. Left as it was, such a question would silently stay leased, or be
judged as if the batch had failed it.

Once every line is stored, the questions still leased to the batch are exactly those rows
(:func:`reconcile`, in the transaction that finishes the batch):

* missing the first time: given back to the queue without spending an attempt, with the error
  class ``batch_row_missing``, so the next batch asks them again (or the online run that
  follows, with ``[batch] retries = "online"``);
* missing again (their class still ``batch_row_missing``): ``failed``, class
  ``batch_row_failed``. ``ground retry --class batch_row_failed`` asks again.

A missing row was never answered, so no ledger row and no cost: asking it once more pays
for it once. Each reconciled batch logs ``batch_reconciled`` with the stats' failed count,
the error lines stored, and the rows missing, asked again and failed. A missing row the stats
do not count as failed is reconciled all the same, and the log line says the counts disagree.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Final

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.batch.api import BatchApi
from pipeline.errors import ErrorClass
from pipeline.gemini.api_errors import GeminiError
from pipeline.gemini.batch_wire import JOB_STATE_PARTIALLY_SUCCEEDED, JOB_STATE_SUCCEEDED
from pipeline.job.states import QuestionState
from pipeline.rows import StateChange
from pipeline.store import batches as store
from pipeline.store import queue

log = logging.getLogger(__name__)

# The end states that claim every row was processed: a row without a line is a missing one.
RECONCILED_STATES: Final = frozenset({JOB_STATE_SUCCEEDED, JOB_STATE_PARTIALLY_SUCCEEDED})
MISSING: Final = ErrorClass.BATCH_ROW_MISSING
FAILED: Final = ErrorClass.BATCH_ROW_FAILED


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What reconciling a batch did."""

    reasked: list[int] = field(default_factory=list)  # question ids given back once
    failed: list[StateChange] = field(default_factory=list)  # missing a second time

    @property
    def missing(self) -> int:
        return len(self.reasked) + len(self.failed)


def decide(rows: list[store.LeasedRow], batch: str) -> Reconciled:
    """Which missing rows are asked again (the first time) and which fail (the second)."""
    reasked: list[int] = []
    failed: list[StateChange] = []
    for row in rows:
        if row.error_class == MISSING:
            failed.append(
                StateChange(
                    row.question_id,
                    QuestionState.FAILED,
                    row.attempts,
                    error_class=FAILED,
                    last_error=f"batch {batch}: the row was missing from the output twice",
                )
            )
        else:
            reasked.append(row.question_id)
    return Reconciled(reasked, failed)


async def reconcile(connection: AsyncConnection, row: store.BatchRow) -> Reconciled:
    """The questions still leased to a stored batch: back to the queue once, failed after."""
    assert row.name is not None
    done = decide(await store.leased_rows(connection, row.id), row.name)
    await queue.release_noting(
        connection,
        store.lease_owner(row.id),
        done.reasked,
        error_class=MISSING,
        last_error=f"batch {row.name}: the row was missing from the output; asked again",
    )
    await queue.apply_state_changes(connection, done.failed)
    return done


async def stats_failed(client: BatchApi, row: store.BatchRow, known: int | None) -> int | None:
    """The failed count the batch's stats report: ``known`` (from the poll that saw it end),
    else from a fresh get (after a restart mid-download); None when neither says."""
    if known is not None or row.name is None:
        return known
    try:
        return (await client.get(row.name)).failed_count
    except GeminiError:  # only the log line needs it
        return None


def report(row: store.BatchRow, done: Reconciled, stats: int | None) -> None:
    """The ``batch_reconciled`` log line, when rows were missing."""
    if not done.missing:
        return
    unexplained = None if stats is None else done.missing - max(stats - row.failed_rows, 0)
    log.warning(
        "batch %s: %d rows missing from its output (its stats count %s failed, %d error lines"
        " stored): %d asked again, %d failed as %s%s",
        row.name,
        done.missing,
        "?" if stats is None else stats,
        row.failed_rows,
        len(done.reasked),
        len(done.failed),
        FAILED,
        f"; {unexplained} of them not counted failed by the stats" if unexplained else "",
        extra={
            "action": "batch_reconciled",
            "batch": row.name,
            "count": done.missing,
            "reasked": len(done.reasked),
            "failed": len(done.failed),
            "stats_failed": stats,
        },
    )
