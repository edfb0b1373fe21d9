"""The review desk's web application (``ground serve``): routes, templates, and serving.

Server-rendered pages (Jinja2, autoescaped) over the job's database, through the store's
read functions; the only script is ``static/desk.js`` (the overview's polling, the keyboard).
Public surface: :class:`DeskContext`, :func:`build_app`, :func:`serve_desk`.
"""

from __future__ import annotations

import anyio
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.results.report import page
from pipeline.serve import overview, views
from pipeline.serve.context import CONTEXT, ENGINE, HERE, TEMPLATES, DeskContext, templates
from pipeline.serve.security import SERVER_LOG, TOKEN_PARAMETER, security_headers, session_gate

__all__ = [
    "build_app",
    "serve_desk",
]

# The report's look (one renderer: its classes for answers, sources, verdicts) and the desk's.
DESK_CSS = """\
nav.desk-nav { margin-bottom: 1rem; }
nav.desk-nav a[aria-current] { font-weight: 600; }
form.filters { display: flex; flex-wrap: wrap; gap: 0.4rem; align-items: center; }
table.list tr.current { outline: 2px solid #4a7bd0; }
td.snippet { color: #333; max-width: 36rem; }
.review-approved { color: #1a7f37; }
.review-rejected { color: #a12; }
.review-needs_edit { color: #9a6700; }
.review-pending { color: #666; }
form.review-form { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: center; }
p.question { font-size: 1.15rem; }
.side-by-side { display: grid; gap: 1rem;
  grid-template-columns: repeat(auto-fit, minmax(22rem, 1fr)); }
.version { border: 1px solid #ddd; border-radius: 6px; padding: 0.5rem; }
p.diff { white-space: pre-wrap; }
ins { background: #dafbe1; } del { background: #ffebe9; }
progress { width: 100%; }
table.states { width: auto; }
"""


async def stylesheet(request: web.Request) -> web.Response:
    """``/static/desk.css``: the report's stylesheet and the desk's."""
    return web.Response(text=page.CSS + DESK_CSS, content_type="text/css", charset="utf-8")


def build_app(engine: AsyncEngine, context: DeskContext) -> web.Application:
    """The desk for one job over ``engine``."""
    app = web.Application(middlewares=[security_headers, session_gate(context.access_token)])
    app[ENGINE] = engine
    app[CONTEXT] = context
    app[TEMPLATES] = templates()
    app.router.add_get("/", overview.overview_page)
    app.router.add_get("/overview.json", overview.overview_json)
    app.router.add_get("/answers", views.answers_page)
    app.router.add_get("/answers/{qid}", views.answer_page)
    app.router.add_post("/answers/{qid}/review", views.review_post)
    app.router.add_get("/static/desk.css", stylesheet)
    app.router.add_static("/static/", HERE / "static", follow_symlinks=False)
    return app


async def serve_desk(engine: AsyncEngine, context: DeskContext, host: str, port: int) -> None:
    """Serve the desk on ``host:port`` until cancelled (Ctrl-C)."""
    runner = web.AppRunner(build_app(engine, context), access_log=None, logger=SERVER_LOG)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        shown = f"[{host}]" if ":" in host else host
        link = f"http://{shown}:{port}/?{TOKEN_PARAMETER}={context.access_token}"
        print(f"review desk for job {context.job_name}: {link}", flush=True)
        await anyio.sleep_forever()
    finally:
        await runner.cleanup()
