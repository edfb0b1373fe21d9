"""``ground report``: one self-contained HTML file (no network loads) about a job, the page
people forward.

Top to bottom: a header (when, which model, backend and endpoint, the spend's caveat), the
summary over every question, the citation precision ``ground verify`` measured (when it
did), the problems (counts and an example of each), managed grounding
beside own retrieval per class (a table and a chart of the same figures), a legend, and the
answers' table. The figures are SQL aggregates; the table holds a bounded selection
(:class:`TableSelection`: the first N in load order, or a seeded random sample, of a class
and states), written row by row as the batches arrive, so memory stays flat however large
the job is. Public surface: :func:`write_report`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
from anyio import AsyncFile
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.job.states import QuestionState
from pipeline.results.billing import billing_status
from pipeline.results.precision import job_precision
from pipeline.results.report import page
from pipeline.results.report.figures import class_figures
from pipeline.results.report.header import ReportContext, render_header, render_legend
from pipeline.results.report.problems import ProblemTally, render_problems
from pipeline.results.report.selection import Sampler, TableFill, TableSelection
from pipeline.results.report.verification import precision_section
from pipeline.results.status import job_status
from pipeline.store.citation_verdicts import VerdictRow, verdicts_by_answer
from pipeline.store.records import Filters, StoredQuestion, read_batches
from pipeline.store.status import (
    class_routes,
    count_in_scope,
    coverage_mean,
    ids_in_scope,
    latency_histogram,
    problem_rows,
)

# The report's pieces the review desk (pipeline.serve) draws with too: one look, one renderer.
__all__ = [
    "write_report",
]

MAX_BATCH = 500  # questions read a round trip for the table


async def _choose(
    connection: AsyncConnection, job_id: int, selection: TableSelection
) -> tuple[int, frozenset[str] | None, ProblemTally]:
    """The scope's size, the sample's ids (None: the first N), and the problems' tally."""
    scope = selection.scope
    tally = ProblemTally(selection.order_key)
    async for problem in problem_rows(connection, job_id, scope):
        tally.add(problem)
    if selection.sample is None:
        return await count_in_scope(connection, job_id, scope), None, tally
    sampler = Sampler(selection.sample, selection.seed)
    async for _, qid in ids_in_scope(connection, job_id, scope):
        sampler.add(qid)
    return sampler.seen, sampler.ids(), tally


def _scope_words(selection: TableSelection) -> str:
    parts = []
    if selection.qclass is not None:
        parts.append(f"of class {selection.qclass!r}")
    if selection.states:
        parts.append("in state " + " or ".join(selection.states))
    return "the questions " + ", ".join(parts) if parts else "every question of the job"


async def _verdicts(
    engine: AsyncEngine, rows: list[tuple[StoredQuestion, str | None]], model: str | None
) -> dict[int, list[VerdictRow]]:
    """The citation verdicts of the rows placed in the table (none without ``model``)."""
    ids = [s.row["a_id"] for s, placed in rows if placed is not None and s.row["a_id"]]
    if model is None or not ids:
        return {}
    async with engine.connect() as connection:
        return await verdicts_by_answer(connection, ids, model)


async def write_report(
    engine: AsyncEngine,
    job_id: int,
    job_name: str,
    out: Path,
    *,
    context: ReportContext,
    selection: TableSelection | None = None,
    verify_model: str | None = None,
) -> int:
    """Write the report to ``out``; the number of questions in its table (problem examples
    added from outside the selection not counted). ``verify_model``: whose citation
    verdicts the precision section and the answers' marks show (None: none)."""
    selection = selection or TableSelection()
    async with engine.connect() as connection:
        status = await job_status(connection, job_id, job_name)
        coverage = await coverage_mean(connection, job_id)
        latency = await latency_histogram(connection, job_id)
        routes = await class_routes(connection, job_id)
        total, chosen, tally = await _choose(connection, job_id, selection)
        precision = await job_precision(connection, job_id, verify_model) if verify_model else None
        bill = await billing_status(
            connection, job_id, model=context.model, backend=context.backend
        )
    shown = min(selection.size, total)
    examples = tally.example_ids()
    fill = TableFill(shown, chosen, examples)
    description = selection.describe(shown, total)
    async with await anyio.open_file(out, "w", encoding="utf-8") as handle:
        await handle.write(page.head(f"ground report: {job_name}"))
        await handle.write(render_header(context, job_name, status.spend_usd))
        await handle.write(page.summary(status, coverage, latency))
        await handle.write(page.billing(bill))
        await handle.write(page.source_policy(status.source_policy))
        await handle.write(precision_section(precision))
        await handle.write(render_problems(tally.problems(), _scope_words(selection)))
        await handle.write(page.routes(class_figures(routes)))
        await handle.write(render_legend())
        states = [str(s) for s in QuestionState if status.states.get(s)]
        await handle.write(page.table_start(states, description))
        wanted = None if chosen is None else chosen | examples
        filters = Filters(states=selection.states, qclass=selection.qclass, ids=wanted)
        if not fill.done:
            batches = read_batches(
                engine, job_id, filters, batch_size=min(max(shown, 1), MAX_BATCH)
            )
            await _write_rows(handle, engine, batches, fill, verify_model)
        await handle.write(page.table_end(fill.extras))
        await handle.write(page.tail())
    return fill.rows


async def _write_rows(
    handle: AsyncFile[str],
    engine: AsyncEngine,
    batches: AsyncIterator[list[StoredQuestion]],
    fill: TableFill,
    verify_model: str | None,
) -> None:
    """The table's rows, a batch at a time, until ``fill`` has what it was asked for."""
    async for batch in batches:
        rows = [(stored, fill.place(stored.row["qid"])) for stored in batch]
        checked = await _verdicts(engine, rows, verify_model)
        await handle.write(
            "".join(
                page.row(
                    stored, example=placed == "example", verdicts=checked.get(stored.row["a_id"])
                )
                for stored, placed in rows
                if placed is not None
            )
        )
        if fill.done:
            return
