"""``ground serve JOB``: the review desk (:mod:`pipeline.serve`) on the job's database.

Binds 127.0.0.1 by default: the desk shows every answer and stores decisions, and has no
login of its own. Runs until Ctrl-C.
"""

from __future__ import annotations

from pipeline.commands.common import complain, find_job_id, opened
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK
from pipeline.grounding.hosts import is_loopback_host
from pipeline.job.spec import JobSpec
from pipeline.results.precision import verify_model
from pipeline.serve import DeskContext, serve_desk

DEFAULT_PORT = 8765


async def serve_command(spec: JobSpec, *, host: str, port: int, reviewer: str | None = None) -> int:
    """Serve the desk for the job until interrupted."""
    if not is_loopback_host(host):
        complain(
            f"warning: --host {host}: the desk has no login; anyone who reaches this address"
            " can read every answer and record decisions"
        )
    async with opened(spec) as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        context = DeskContext(
            job_id=job_id,
            job_name=spec.name,
            model=spec.model.name,
            backend=spec.model.backend,
            base_url=spec.model.base_url,
            verify_model=verify_model(spec),
            reviewer=reviewer,
        )
        try:
            await serve_desk(engine, context, host, port)
        except OSError as exc:
            complain(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
            return EXIT_FAILED
    return EXIT_OK
