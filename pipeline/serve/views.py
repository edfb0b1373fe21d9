"""The desk's answers: the list (keyset pages, filters, search), one answer, a review.

Query parameters are read strictly: a value outside its choices is ignored, never passed to
SQL as text (every value goes as a bound parameter anyway). The answer is drawn by
:func:`pipeline.grounding.render_html` (escaped text, citation markers linking each source's
resolved destination, unsupported spans, the Search suggestions in a sandboxed iframe), the
verdict marks by the report's :func:`answer_marks`: the same renderer as ``ground report``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web
from markupsafe import Markup

from pipeline.grounding.render import render_html, safe_http_url
from pipeline.job.states import QuestionState
from pipeline.results.export.records import destinations, grounded_answer, to_record
from pipeline.results.report.header import render_legend
from pipeline.results.report.verification import answer_marks
from pipeline.serve.context import CONTEXT, ENGINE, render
from pipeline.serve.diff import text_diff
from pipeline.serve.inputs import (
    NOTE_CHARS,
    REVIEWER_CHARS,
    SEARCH_CHARS,
    InputRefused,
    cursor,
    desk_path,
    question_path_id,
    text_input,
)
from pipeline.serve.security import CsrfRefused, check_csrf
from pipeline.store import reviews
from pipeline.store.citation_verdicts import verdicts_by_answer
from pipeline.store.records import StoredQuestion, raw_response, read_versions

PAGE_SIZE = 50
VERDICTS = ("supported", "partly", "not_supported", "contradicted", "unreadable", "no_verdict")
ROUTES = ("managed", "own")
STATES = tuple(str(state) for state in QuestionState)
VERDICT_KEYS = {"approved": "a", "rejected": "r", "needs_edit": "e"}  # the review keyboard
FILTER_NAMES = ("state", "class", "grounded", "route", "domain", "verdict", "review", "q")


def _choice(value: str | None, choices: tuple[str, ...]) -> str | None:
    return value if value in choices else None


def filters_of(query: Any) -> reviews.DeskFilters:
    """The list's filters from a request's query string (:class:`InputRefused` for a free-text
    filter with a NUL or past its length)."""
    grounded = {"yes": True, "no": False}.get(query.get("grounded", ""))
    return reviews.DeskFilters(
        state=_choice(query.get("state"), STATES),
        qclass=text_input(query.get("class"), "class", SEARCH_CHARS) or None,
        grounded=grounded,
        route=_choice(query.get("route"), ROUTES),
        domain=text_input(query.get("domain"), "domain", SEARCH_CHARS) or None,
        verdict=_choice(query.get("verdict"), VERDICTS),
        review=_choice(query.get("review"), reviews.REVIEW_STATUSES),
        search=text_input(query.get("q"), "search", SEARCH_CHARS) or None,
    )


def refused(request: web.Request, exc: InputRefused) -> web.HTTPBadRequest:
    """A 400 whose page says what was refused (escaped by the template)."""
    page = render(request, "refused.html", message=str(exc))
    return web.HTTPBadRequest(text=page.text, content_type="text/html")


async def answers_page(request: web.Request) -> web.Response:
    """``/answers``: one page of the job's questions, filtered."""
    context = request.app[CONTEXT]
    try:
        filters = filters_of(request.query)
        after = cursor(request.query.get("after"))
    except InputRefused as exc:
        raise refused(request, exc) from None
    async with request.app[ENGINE].connect() as connection:
        rows, following = await reviews.list_page(
            connection, context.job_id, filters, after=after, size=PAGE_SIZE
        )
    kept = {k: v for k in FILTER_NAMES if (v := request.query.get(k))}
    next_url = None if following is None else "/answers?" + urlencode({**kept, "after": following})
    return render(
        request,
        "answers.html",
        rows=rows,
        chosen=kept,
        next_url=next_url,
        first_url="/answers?" + urlencode(kept),
        states=STATES,
        verdicts=VERDICTS,
        routes=ROUTES,
        review_statuses=reviews.REVIEW_STATUSES,
        verdict_keys=VERDICT_KEYS,
        reviewer=_reviewer(request),
    )


def _reviewer(request: web.Request) -> str:
    """The name the page's decisions go under: the last one used here, or ``--reviewer``."""
    return request.cookies.get("ground_reviewer") or request.app[CONTEXT].reviewer or ""


def _drawn(stored: StoredQuestion, verdicts: list[Any] | None) -> dict[str, Any]:
    """One answer version as the page shows it."""
    record = to_record(stored, verdicts=verdicts)
    answer = grounded_answer(stored)
    html = "" if answer is None else render_html(answer, destinations(stored))
    source_rows = [
        {**dict(s), "link": safe_http_url(s["destination"] or s["uri"])} for s in stored.sources
    ]
    return {
        "record": record,
        "version": stored.row["a_version"],
        "created_at": stored.row["a_created_at"],
        "html": Markup(html + answer_marks(record)),  # noqa: S704 (escaped by the renderers)
        "sources": source_rows,
    }


async def answer_page(request: web.Request) -> web.Response:
    """``/answers/{qid}``: the answer, its sources, verdicts, versions and reviews."""
    context = request.app[CONTEXT]
    engine = request.app[ENGINE]
    try:
        qid = question_path_id(request.match_info["qid"])
    except InputRefused as exc:
        raise refused(request, exc) from None
    versions = await read_versions(engine, context.job_id, qid, all_versions=True)
    if not versions:
        raise web.HTTPNotFound(text="no such question in this job")
    answer_ids = [v.row["a_id"] for v in versions if v.row["a_id"] is not None]
    async with engine.connect() as connection:
        checked = (
            await verdicts_by_answer(connection, answer_ids, context.verify_model)
            if context.verify_model and answer_ids
            else {}
        )
        history = await reviews.review_history(connection, versions[-1].row["id"])
        before, after = await reviews.neighbours(connection, context.job_id, versions[-1].row["id"])
    drawn = [_drawn(v, checked.get(v.row["a_id"])) for v in versions if v.row["a_id"]]
    diff = (
        text_diff(drawn[-2]["record"]["answer"] or "", drawn[-1]["record"]["answer"] or "")
        if len(drawn) > 1
        else None
    )
    return render(
        request,
        "answer.html",
        question=versions[-1].row,
        latest=drawn[-1] if drawn else None,
        earlier=drawn[:-1],
        diff=diff,
        raw=await raw_response(engine, context.job_id, qid),
        history=history,
        status=_status(history, versions[-1].row["a_version"]),
        verdict_choices=reviews.REVIEW_VERDICTS,
        verdict_keys=VERDICT_KEYS,
        reviewer=_reviewer(request),
        legend=Markup(render_legend()),  # noqa: S704 (our own text)
        before=before,
        after=after,
        note_chars=NOTE_CHARS,
        index_note=_index_note(engine.dialect.name, versions[-1].row["text"], drawn),
    )


def _index_note(dialect: str, question: str, drawn: list[dict[str, Any]]) -> str | None:
    """What the page says when the search index holds only a prefix of this question's or
    its answer's text (PostgreSQL's ``tsvector`` is bounded; SQLite's index is whole)."""
    if dialect != "postgresql":
        return None
    answer = (drawn[-1]["record"]["answer"] or "") if drawn else ""
    if max(len(question or ""), len(answer)) <= reviews.DESK_INDEX_CHARS:
        return None
    return (
        f"The desk's search indexes the first {reviews.DESK_INDEX_CHARS:,} characters of this"
        " question and of its answer: words past them are not found by the search."
    )


def _status(history: list[reviews.Review], version: int | None) -> str:
    for review in history:  # newest first
        if review.answer_version == version:
            return review.verdict
    return reviews.PENDING


async def review_post(request: web.Request) -> web.StreamResponse:
    """``POST /answers/{qid}/review``: store a decision (CSRF token checked), then back to
    the answer (or the next one, with ``next``)."""
    context = request.app[CONTEXT]
    form = await request.post()
    try:
        check_csrf(context.csrf_token, form.get("csrf"))
    except CsrfRefused as exc:
        raise web.HTTPForbidden(text=str(exc)) from None
    verdict = form.get("verdict")
    try:
        qid = question_path_id(request.match_info["qid"])
        reviewer = text_input(form.get("reviewer") or context.reviewer, "reviewer", REVIEWER_CHARS)
        note = text_input(form.get("note"), "note", NOTE_CHARS)
        target = _next_path(form.get("next"), qid)
    except InputRefused as exc:
        raise refused(request, exc) from None
    if verdict not in reviews.REVIEW_VERDICTS or not reviewer:
        raise web.HTTPBadRequest(text="a review needs a verdict and the reviewer's name")
    async with request.app[ENGINE].begin() as connection:
        question_id = await reviews.question_id_of(connection, context.job_id, qid)
        if question_id is None:
            raise web.HTTPNotFound(text="no such question in this job")
        await reviews.record_review(
            connection,
            question_id,
            verdict=str(verdict),
            reviewer=reviewer,
            note=note or None,
            now=dt.datetime.now(dt.UTC),
        )
    response = web.HTTPSeeOther(location=target)
    response.set_cookie("ground_reviewer", reviewer, httponly=True, samesite="Strict")
    raise response


def _next_path(value: object, qid: str) -> str:
    """Where a stored review sends the browser: ``next`` when it is a path on the desk
    (:func:`desk_path`), the answer itself when none is given; refused otherwise."""
    if value is None or value == "":
        return "/answers/" + quote(qid, safe="")
    path = desk_path(value)
    if path is None:
        raise InputRefused("next must be a path on this desk, such as /answers/q1")
    return path
