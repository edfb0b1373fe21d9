"""``ground cite``: print a saved or stored response's answer with its citations."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from pipeline import event_loop
from pipeline.commands.common import DatabaseUnavailable, opened
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.spec import JobSpecError, load_jobspec
from pipeline.results.cite import FORMATS, Uncitable, cite_body, details, render
from pipeline.results.export.records import destinations, grounded_answer
from pipeline.store import queue
from pipeline.store.records import StoredQuestion, raw_response, read_one
from pipeline.watch.terminal import printable

__all__ = [
    "cite_command",
]


def cite_command(args: argparse.Namespace) -> int:
    """A saved response (``RESPONSE.json``) or a stored one (``--job JOB --id ID``)."""
    if args.job is not None or args.id is not None:
        return cite_stored(args.response, args.job, args.id, args.fmt, args.min_confidence)
    return cite_main(args.response, args.fmt, args.min_confidence)


def _say(label: str, line: str) -> None:
    print(printable(f"ground cite: {label}: {line}"), file=sys.stderr)


def _fail(label: str, reason: str) -> int:
    _say(label, reason)
    return 1


def cite_main(path: str, fmt: str, min_confidence: float | None) -> int:
    """Print a saved response's answer with citations to stdout; 0 on success, 1 on failure.

    A failure (missing or unreadable file, or a body :func:`cite_body` cannot cite) prints one
    line naming the file and the reason to stderr. Notes and mapping warnings go to stderr too
    (for JSON output the warnings are in the document instead).
    """
    if fmt not in FORMATS:
        return _fail(path, f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")
    try:
        body = Path(path).read_bytes()
    except FileNotFoundError:
        return _fail(path, "no such file")
    except OSError as exc:
        return _fail(path, f"cannot read: {exc.strerror or exc}")
    return _cite_body(path, body, fmt, min_confidence)


def _cite_body(
    label: str,
    body: bytes,
    fmt: str,
    min_confidence: float | None,
    links: Mapping[int, str] | None = None,
) -> int:
    try:
        cited = cite_body(body, min_confidence)
    except Uncitable as exc:
        return _fail(label, str(exc))
    for note in cited.notes:
        _say(label, f"note: {note}")
    return _print(label, cited.answer, fmt, links, details(cited.answer))


def _print(
    label: str,
    answer: GroundedAnswer,
    fmt: str,
    links: Mapping[int, str] | None,
    notes: list[str],
) -> int:
    if fmt != "json":
        for note in notes:
            _say(label, f"note: {note}")
        for warning in answer.warnings:
            _say(label, f"warning: {warning}")
    rendered = render(answer, fmt, links)
    # JSON escapes control characters itself; HTML and Markdown are text a terminal may show.
    sys.stdout.write(rendered if fmt == "json" else printable(rendered))
    sys.stdout.flush()
    return 0


def cite_stored(
    response: str | None, job: str | None, qid: str | None, fmt: str, min_confidence: float | None
) -> int:
    """``ground cite --job JOB --id ID``: the stored response, markers linked to the stored
    destinations (the redirect links in the response expire; the resolver kept where they led).
    An answer of own retrieval is rendered from its stored citations and sources (nothing in
    its response says what it cites but the markers, already read when it was stored).
    """
    if job is None or qid is None or response is not None:
        print("ground cite: give RESPONSE.json, or --job JOB and --id ID", file=sys.stderr)
        return 2
    try:
        spec = load_jobspec(job)
    except JobSpecError as exc:
        print(printable(f"ground cite: {exc}"), file=sys.stderr)
        return 2
    label = f"{spec.name}/{qid}"

    async def fetch() -> tuple[str | None, StoredQuestion | None]:
        async with opened(spec, purpose="read") as engine:
            async with engine.connect() as connection:
                job_id = await queue.find_job(connection, spec.name)
            if job_id is None:
                return None, None
            stored = await read_one(engine, job_id, qid)
            body = await raw_response(engine, job_id, qid)
            return body, stored

    try:
        body, stored = event_loop.run(fetch)
    except DatabaseUnavailable as exc:
        print(printable(f"ground cite: {exc}"), file=sys.stderr)
        return int(exc.exit_status)
    if body is None:
        return _fail(label, "no stored answer for this question (not answered yet?)")
    links = destinations(stored) if stored is not None else {}
    if stored is not None and stored.row["a_route"] == "own":
        answer = grounded_answer(stored)
        assert answer is not None  # a stored body means a stored answer
        return _print(label, answer, fmt, links, ["answered by own retrieval"])
    return _cite_body(label, body.encode(), fmt, min_confidence, links)
