"""``ground serve JOB``: the review desk (:mod:`pipeline.serve`) on the job's database.

Binds 127.0.0.1 by default: the desk shows every answer and stores decisions. Every session
needs the access token, carried by the link printed at start (:mod:`pipeline.serve.security`):
a fresh one per start, or the one in ``GROUND_DESK_TOKEN``, which ``--host`` beyond loopback
requires (a token the user chose, to share with the reviewers). Runs until Ctrl-C.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import anyio

from pipeline.commands.common import complain, find_job_id, opened
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pipeline.grounding.hosts import is_loopback_host
from pipeline.job.spec import JobSpec
from pipeline.results.precision import verify_model
from pipeline.serve.app import serve_desk
from pipeline.serve.context import DeskContext
from pipeline.serve.security import MIN_TOKEN_LENGTH, new_token
from pipeline.store.engine import sqlite_file

__all__ = [
    "serve_command",
]

DEFAULT_PORT = 8765
TOKEN_VARIABLE = "GROUND_DESK_TOKEN"  # noqa: S105 (the variable's name, not a secret)


def token_problem(host: str, token: str | None) -> str | None:
    """Why the desk must not start on ``host`` with ``token`` (GROUND_DESK_TOKEN), or None."""
    if token is None:
        if is_loopback_host(host):
            return None
        return (
            f"--host {host}: beyond loopback the desk starts only with a token you chose, to"
            f" give the reviewers: set {TOKEN_VARIABLE} (at least {MIN_TOKEN_LENGTH} random"
            " characters, e.g. from `python -c 'import secrets; print(secrets.token_urlsafe())'`)"
        )
    if len(token) < MIN_TOKEN_LENGTH or not token.isprintable() or " " in token:
        return (
            f"{TOKEN_VARIABLE}: a token of at least {MIN_TOKEN_LENGTH} printable characters"
            " without spaces is needed"
        )
    return None


async def serve_command(
    spec: JobSpec,
    *,
    host: str,
    port: int,
    reviewer: str | None = None,
    env: Mapping[str, str] = os.environ,
) -> int:
    """Serve the desk for the job until interrupted. The access token is ``env``'s
    ``GROUND_DESK_TOKEN``, or a fresh one (loopback only), printed in the link."""
    token = env.get(TOKEN_VARIABLE) or None
    problem = token_problem(host, token)
    if problem is not None:
        complain(problem)
        return EXIT_USAGE
    path = sqlite_file(spec.database_url)
    if path is not None and not await anyio.Path(path).exists():  # never made: the desk makes none
        complain(
            f"job {spec.name!r} has not been loaded or run yet (no database at {path});"
            f" `ground load {spec.path}` or `ground run {spec.path}` first"
        )
        return EXIT_USAGE
    async with opened(spec) as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_USAGE
        context = DeskContext(
            job_id=job_id,
            job_name=spec.name,
            model=spec.model.name,
            backend=spec.model.backend,
            base_url=spec.model.base_url,
            verify_model=verify_model(spec),
            reviewer=reviewer,
            access_token=token or new_token(),
        )
        try:
            await serve_desk(engine, context, host, port)
        except OSError as exc:
            complain(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
            return EXIT_FAILED
    return EXIT_OK
