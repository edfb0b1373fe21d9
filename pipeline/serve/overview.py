"""The desk's job overview: states and progress (polled by the page while a run works), per
class managed grounding against own retrieval, the citation precision where verified, the
spend (an estimate), review progress, and the problems with an example each.

The figures are those ``ground status`` and the report compute (:func:`job_status`, the
report's class figures and precision section), so the desk and the report never disagree.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from markupsafe import Markup

from pipeline.results.precision import job_precision
from pipeline.results.report import page
from pipeline.results.report.figures import class_figures
from pipeline.results.report.header import spend_caveat
from pipeline.results.report.verification import precision_section
from pipeline.results.status import JobStatus, job_status
from pipeline.serve.context import CONTEXT, ENGINE, render
from pipeline.store import reviews
from pipeline.store.status import class_routes


def progress(status: JobStatus, review_counts: dict[str, int]) -> dict[str, Any]:
    """The figures the overview polls: every state, answers, spend, reviews (JSON-ready)."""
    return {
        "total": status.total,
        "terminal": status.terminal,
        "answers": status.answers,
        "grounded": status.grounded,
        "grounded_rate": status.grounded_rate,
        "spend_usd": f"{status.spend_usd:.4f}",
        "states": status.states,
        "reviews": review_counts,
    }


async def _read(request: web.Request) -> tuple[JobStatus, dict[str, int]]:
    context = request.app[CONTEXT]
    async with request.app[ENGINE].connect() as connection:
        status = await job_status(connection, context.job_id, context.job_name)
        counts = await reviews.review_counts(connection, context.job_id)
    return status, counts


async def overview_json(request: web.Request) -> web.Response:
    """``/overview.json``: :func:`progress`, read afresh (the page polls it)."""
    status, counts = await _read(request)
    return web.json_response(progress(status, counts), headers={"Cache-Control": "no-store"})


async def overview_page(request: web.Request) -> web.Response:
    """``/``: the job overview."""
    context = request.app[CONTEXT]
    status, counts = await _read(request)
    async with request.app[ENGINE].connect() as connection:
        routes = await class_routes(connection, context.job_id)
        precision = (
            await job_precision(connection, context.job_id, context.verify_model)
            if context.verify_model
            else None
        )
    # The report's own sections: their HTML escapes every value drawn from the job.
    return render(
        request,
        "overview.html",
        status=status,
        figures=progress(status, counts),
        caveat=spend_caveat(context.base_url, status.spend_usd),
        routes=Markup(page.routes(class_figures(routes))),  # noqa: S704
        precision=Markup(precision_section(precision)),  # noqa: S704
        model=context.model,
    )
