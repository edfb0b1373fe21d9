"""``ground``, the command line: argument parsing (:mod:`.parser`) and dispatch (:mod:`.dispatch`)
only; each command calls one function in :mod:`pipeline.commands`.

The console script imports this module and calls :func:`main`, so this module imports nothing
of its own: the parser, the job file's validation and their libraries (a tenth of a second
and more) are imported inside :func:`main`, where a Ctrl-C meanwhile still ends in one
``ground: interrupted`` line and status 130, never a traceback from the middle of an import.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

EXIT_INTERRUPTED = 130  # pipeline.exit_codes.EXIT_INTERRUPTED (128 + SIGINT), not imported yet

__all__ = ["main"]


_at_exit: list[bool] = []  # whether the interpreter's exit is made quick already
# Extensions that count their objects at the interpreter's exit and report those still alive
# as leaks on stderr (nanobind's check: DuckDB): with them loaded the exit is left as it is.
_COUNTED_AT_EXIT = ("_duckdb",)


def _freeze() -> None:
    if not any(name in sys.modules for name in _COUNTED_AT_EXIT):
        import gc

        gc.freeze()


def _quick_exit() -> None:
    """At the interpreter's exit, :func:`gc.freeze` first: its last collections then skip every
    object alive, instead of walking a heap of SQLAlchemy, asyncpg and aiohttp for 0.7 s on an
    idle core (2-3 s on a loaded one, for each process of a fleet ending together). Nothing
    is left unwritten: files are flushed and closed by the commands, and by the interpreter."""
    if not _at_exit:
        import atexit

        atexit.register(_freeze)
        _at_exit.append(True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``ground`` command (see :func:`pipeline.cli.dispatch.main`)."""
    _quick_exit()
    try:
        from pipeline.cli.dispatch import main as dispatch
    except KeyboardInterrupt:
        print("ground: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return dispatch(argv)
