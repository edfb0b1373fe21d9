"""``python -m tests.support.traced_run TRACE ground-args...``: ``ground`` as its console script
runs it, with every SQL statement this process sends after its online run ended (the run's
close) appended to ``TRACE`` as JSON lines (``{"sql": ...}``). A test reads what each process
of a fleet asked the database while it closed."""

from __future__ import annotations

import sys
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import Engine

from pipeline.commands import run as run_command

_closing = False
_statements: list[str] = []


def _record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
    if _closing:
        _statements.append(statement)


def _traced_online(original: Any) -> Any:
    async def online(*args: Any, **kwargs: Any) -> None:
        global _closing
        try:
            await original(*args, **kwargs)
        finally:
            _closing = True

    return online


def main() -> int:
    trace, argv = sys.argv[1], sys.argv[2:]
    event.listen(Engine, "before_cursor_execute", _record)
    run_command._run_online = _traced_online(run_command._run_online)  # pyright: ignore[reportPrivateUsage]
    from pipeline import cli

    try:
        return cli.main(argv)
    finally:
        with open(trace, "ab") as out:
            out.writelines(orjson.dumps({"sql": s}) + b"\n" for s in _statements)


if __name__ == "__main__":
    sys.exit(main())
