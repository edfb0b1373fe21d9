"""What every page of the desk reads: the job, the engine, the templates, and the render."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.serve.security import new_token

__all__ = [
    "DeskContext",
]

HERE = Path(__file__).parent


@dataclass(frozen=True, slots=True)
class DeskContext:
    """The job the desk shows, and what it needs to say about it."""

    job_id: int
    job_name: str
    model: str
    backend: str
    base_url: str
    verify_model: str | None = None  # whose citation verdicts are shown
    reviewer: str | None = None  # the name decisions are stored under (--reviewer)
    csrf_token: str = field(default_factory=new_token)
    access_token: str = field(default_factory=new_token)  # opens a session (the printed link)


ENGINE = web.AppKey("engine", AsyncEngine)
CONTEXT = web.AppKey("context", DeskContext)
TEMPLATES = web.AppKey("templates", jinja2.Environment)


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def templates() -> jinja2.Environment:
    """The desk's templates: every value escaped unless our own code marked it safe."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["percent"] = _percent
    environment.filters["path_part"] = lambda value: quote(str(value), safe="")
    return environment


def render(request: web.Request, name: str, **values: Any) -> web.Response:
    """The template ``name`` filled with ``values`` (and the job and CSRF token), as HTML."""
    context = request.app[CONTEXT]
    page = (
        request.app[TEMPLATES]
        .get_template(name)
        .render(job=context.job_name, csrf=context.csrf_token, path=request.path, **values)
    )
    return web.Response(text=page, content_type="text/html", charset="utf-8")
