"""``ground cite RESPONSE.json``: render a saved generateContent response with its citations."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from pipeline.gemini.wire import MalformedResponse, decode_error, decode_response
from pipeline.grounding import (
    GroundedAnswer,
    ground_answer,
    render_html_document,
    render_markdown,
    to_json_dict,
)
from pipeline.watch.terminal import printable

if TYPE_CHECKING:
    from pipeline.store.records import StoredQuestion

FORMATS = ("markdown", "html", "json")


def add_cite_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``cite`` subcommand's arguments (for the CLI wiring); pass them to :func:`cite_main`."""
    parser.add_argument(
        "response", metavar="RESPONSE.json", nargs="?", help="saved generateContent body"
    )
    parser.add_argument("--job", metavar="JOB", help="read the stored response from this job...")
    parser.add_argument("--id", metavar="ID", help="...of this question (with --job)")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, default="markdown")
    parser.add_argument(
        "--min-confidence",
        type=_confidence,
        default=None,
        metavar="X",
        help="drop chunk references scored below X (only where scores were sent)",
    )


def _confidence(text: str) -> float:
    """A confidence score: a finite number from 0 to 1 (the API's scores are in that range)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # nan fails both comparisons
        raise argparse.ArgumentTypeError(f"{text!r}: a confidence is a number from 0 to 1")
    return value


def _fail(path: str, reason: str, err: TextIO) -> int:
    print(printable(f"ground cite: {path}: {reason}"), file=err)
    return 1


def details(answer: GroundedAnswer) -> list[str]:
    """One line per fact of the newer shapes that markdown and HTML do not show inline."""
    lines: list[str] = []
    for s in answer.sources:
        if s.file_search_store is not None or s.custom_metadata:
            meta = ", ".join(f"{m.get('key')}={_metadata_value(m)}" for m in s.custom_metadata)
            lines.append(
                f"source [{s.index + 1}] from {s.file_search_store or 'a store'}"
                + (f" ({meta})" if meta else "")
            )
    if answer.maps_widget_token is not None:
        lines.append(f"Maps widget context token: {answer.maps_widget_token}")
    if answer.dynamic_retrieval_score is not None:
        lines.append(f"dynamic retrieval score: {answer.dynamic_retrieval_score:g}")
    for url, status in answer.url_statuses:
        lines.append(f"URL context: {url} {status}")
    if answer.tool_parts:
        lines.append(f"{answer.tool_parts} tool-call or code part(s) (in the raw response)")
    return lines


def _metadata_value(entry: dict[str, Any]) -> object:
    for key in ("stringValue", "numericValue"):
        if key in entry:
            return entry[key]
    values = entry.get("stringListValue")
    if isinstance(values, dict):
        return "|".join(map(str, values.get("values", [])))
    return None


def render(answer: GroundedAnswer, fmt: str, destinations: Mapping[int, str] | None = None) -> str:
    """The answer in one of :data:`FORMATS`; markers link to ``destinations`` where given."""
    if fmt == "markdown":
        return render_markdown(answer, destinations)
    if fmt == "html":
        return render_html_document(answer, destinations)
    if fmt == "json":
        return orjson.dumps(to_json_dict(answer), option=orjson.OPT_INDENT_2).decode() + "\n"
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def cite_main(path: str, fmt: str, min_confidence: float | None) -> int:
    """Print a saved response's answer with citations to stdout; 0 on success, 1 on failure.

    Failures (missing or unreadable file, not JSON, not a generateContent response, an API
    error body, a blocked prompt, no candidate, a candidate with no answer text) print one line
    naming the file and the reason to stderr. Mapping warnings go to stderr too (for JSON
    output they are in the document instead).
    """
    err = sys.stderr
    if fmt not in FORMATS:
        return _fail(path, f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})", err)
    try:
        body = Path(path).read_bytes()
    except FileNotFoundError:
        return _fail(path, "no such file", err)
    except OSError as exc:
        return _fail(path, f"cannot read: {exc.strerror or exc}", err)
    return _cite_body(path, body, fmt, min_confidence)


def _cite_body(
    path: str,
    body: bytes,
    fmt: str,
    min_confidence: float | None,
    destinations: Mapping[int, str] | None = None,
) -> int:
    """Render one response body (``path`` names it in messages)."""
    out, err = sys.stdout, sys.stderr
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _fail(path, f"not JSON ({exc})", err)
    api_error = decode_error(body)
    if api_error is not None:
        status = f" {api_error.status}" if api_error.status else ""
        return _fail(path, f"API error {api_error.code}{status}: {api_error.message}", err)
    try:
        response = decode_response(body)
    except MalformedResponse as exc:
        return _fail(path, f"not a generateContent response ({exc})", err)

    feedback = response.prompt_feedback
    if not response.candidates:
        if feedback is not None and feedback.block_reason:
            detail = f": {feedback.block_reason_message}" if feedback.block_reason_message else ""
            return _fail(path, f"prompt blocked ({feedback.block_reason}){detail}", err)
        return _fail(path, "no candidates (not a generateContent response?)", err)
    if len(response.candidates) > 1:
        print(
            f"ground cite: {path}: note: {len(response.candidates)} candidates; showing the first",
            file=err,
        )
    candidate = response.candidates[0]

    try:
        answer = ground_answer(candidate, min_confidence=min_confidence)
    except ValueError as exc:
        return _fail(path, str(exc), err)
    if not answer.text and candidate.finish_reason not in (None, "STOP"):
        return _fail(path, f"no answer text (finishReason {candidate.finish_reason})", err)

    if candidate.finish_reason not in (None, "STOP"):
        print(f"ground cite: {path}: note: finishReason {candidate.finish_reason}", file=err)
    if not answer.grounded:
        print(f"ground cite: {path}: note: no groundingMetadata (ungrounded answer)", file=err)
    if fmt != "json":
        for line in details(answer):
            print(printable(f"ground cite: {path}: note: {line}"), file=err)
        for warning in answer.warnings:
            print(printable(f"ground cite: {path}: warning: {warning}"), file=err)
    rendered = render(answer, fmt, destinations)
    # JSON escapes control characters itself; HTML and Markdown are text a terminal may show.
    out.write(rendered if fmt == "json" else printable(rendered))
    out.flush()
    return 0


def _cite_answer(label: str, answer: GroundedAnswer, fmt: str, links: Mapping[int, str]) -> int:
    """Render an answer rebuilt from stored rows (own retrieval's: its citations were made
    from the model's markers, not read from the response)."""
    err = sys.stderr
    if fmt != "json":
        print(printable(f"ground cite: {label}: note: answered by own retrieval"), file=err)
        for warning in answer.warnings:
            print(printable(f"ground cite: {label}: warning: {warning}"), file=err)
    rendered = render(answer, fmt, links)
    sys.stdout.write(rendered if fmt == "json" else printable(rendered))
    sys.stdout.flush()
    return 0


def cite_stored(args: argparse.Namespace, fmt: str, min_confidence: float | None) -> int:
    """``ground cite --job JOB --id ID``: the stored response, markers linked to the stored
    destinations (the redirect links in the response expire; the resolver kept where they led).
    An answer of own retrieval is rendered from its stored citations and sources (nothing in
    its response says what it cites but the markers, already read when it was stored).
    """
    import anyio

    from pipeline.commands.common import DatabaseUnavailable, opened
    from pipeline.job.spec import JobSpecError, load_jobspec
    from pipeline.results.export import destinations, grounded_answer
    from pipeline.store import queue
    from pipeline.store.records import raw_response, read_one

    err = sys.stderr
    if args.job is None or args.id is None or args.response is not None:
        print("ground cite: give RESPONSE.json, or --job JOB and --id ID", file=err)
        return 2
    try:
        spec = load_jobspec(args.job)
    except JobSpecError as exc:
        print(printable(f"ground cite: {exc}"), file=err)
        return 2
    label = f"{spec.name}/{args.id}"

    async def fetch() -> tuple[str | None, StoredQuestion | None]:
        async with opened(spec, purpose="read") as engine:
            async with engine.connect() as connection:
                job_id = await queue.find_job(connection, spec.name)
            if job_id is None:
                return None, None
            stored = await read_one(engine, job_id, args.id)
            body = await raw_response(engine, job_id, args.id)
            return body, stored

    try:
        body, stored = anyio.run(fetch)
    except DatabaseUnavailable as exc:
        print(printable(f"ground cite: {exc}"), file=err)
        return int(exc.exit_status)
    if body is None:
        return _fail(label, "no stored answer for this question (not answered yet?)", err)
    links = destinations(stored) if stored is not None else {}
    if stored is not None and stored.row["a_route"] == "own":
        answer = grounded_answer(stored)
        assert answer is not None  # a stored body means a stored answer
        return _cite_answer(label, answer, fmt, links)
    return _cite_body(label, body.encode(), fmt, min_confidence, links)
