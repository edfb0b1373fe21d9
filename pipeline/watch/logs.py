"""Log records for people (``key=value`` text) and for machines (JSON lines).

Both formatters keep every ``extra`` field a call site passed, and every record carries a
machine-readable ``action`` (``-`` when the call site gave none). Which one a process uses:
``--log-format text|json``; by default text when stderr is a terminal, JSON lines otherwise
(a log file, journald, a container's log), so an unattended run is parseable as it stands.
Both pass the finished line through :func:`pipeline.redaction.redact`: a secret that reached
a record some other way (a library's exception, a traceback) is not written either.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from typing import Literal, TextIO

import orjson

from pipeline.redaction import redact

__all__ = [
    "LOG_FORMATS",
    "KeyValueFormatter",
    "configure_logging",
]

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
CHATTY_LOGGERS = ("alembic", "aiosqlite", "asyncio", "google", "urllib3", "aiohttp")

# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def extra_fields(record: logging.LogRecord) -> dict[str, object]:
    """The fields a call site added with ``extra=`` (``action`` included)."""
    return {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS}


class KeyValueFormatter(logging.Formatter):
    """``time level logger action=A message key=value ...``: every ``extra`` field is kept."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s action=%(action)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "action"):
            record.action = "-"
        line = super().format(record)
        extras = [
            f"{key}={_log_value(value)}"
            for key, value in extra_fields(record).items()
            if key != "action"
        ]
        return redact(f"{line} {' '.join(extras)}" if extras else line)


def _log_value(value: object) -> str:
    text = str(value)
    return repr(text) if not text or any(c.isspace() or c in "\"'=" for c in text) else text


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``action``,
    ``message``, then every ``extra`` field; ``exc`` holds a traceback when there is one.

    A value JSON cannot carry (a Decimal, a datetime, an enum member) is written as its
    ``str``, never dropped.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "action": getattr(record, "action", "-"),
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            if key != "action":
                entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return redact(orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS).decode())


def default_format(stream: TextIO | None = None) -> LogFormat:
    """Text on a terminal, JSON lines otherwise."""
    stream = stream or sys.stderr  # None without a console (pythonw, a closed stderr)
    return "text" if stream is not None and stream.isatty() else "json"


def configure_logging(*, verbose: bool, fmt: LogFormat | None = None) -> LogFormat:
    """Send every record to stderr in ``fmt`` (default: :func:`default_format`)."""
    fmt = fmt or default_format()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=[handler])
    for chatty in CHATTY_LOGGERS:
        logging.getLogger(chatty).setLevel(logging.WARNING)
    return fmt
