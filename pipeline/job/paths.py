"""The files and databases a job file names, resolved against the directory holding it (so a
job runs the same from any working directory) and checked where a check is cheap: the
question file is a file, the database URL names a dialect we speak, the prices file parses."""

from __future__ import annotations

import stat
import warnings
from pathlib import Path
from urllib.parse import quote

import msgspec

from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import LimitsSection, RetrievalSection, SourceSection


def source_path(source: SourceSection, base: Path) -> Path:
    """``[source] file`` resolved against ``base``; a directory, a device or a pipe is refused
    (the file is read twice, once to check every row, and fingerprinted by its size)."""
    path = (base / source.file).resolve()
    if not source.file.strip():
        return path
    try:
        mode = path.stat().st_mode
    except OSError:
        return path  # a missing file is the loader's to name, with the run's context
    kind = not_a_file(mode)
    if kind is not None:
        raise KeyRefused(
            "source.file", f"{source.file!r} is {kind}, not a question file (a JSONL or CSV file)"
        )
    return path


def not_a_file(mode: int) -> str | None:
    """What a path whose ``st_mode`` is ``mode`` is, when it is not a regular file."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), None)


def checked_prices(limits: LimitsSection, base: Path) -> LimitsSection:
    """``[limits] prices_file`` resolved against ``base`` and read whole now, so that a file
    that is missing, not TOML or not a valid price table is refused at load, naming it, and
    not found by the first call of a run."""
    if not limits.prices_file.strip():
        return limits
    prices = (base / limits.prices_file).resolve()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnconfirmedPriceWarning)  # the run warns per row
            load_prices(prices)
    except ValueError as exc:  # PriceError names the file, the row and the key
        raise KeyRefused("limits.prices_file", str(exc)) from None
    return msgspec.structs.replace(limits, prices_file=str(prices))


def resolved_retrieval(retrieval: RetrievalSection, base: Path) -> RetrievalSection:
    """``[retrieval]`` with its docs path absolute and a relative sqlite url resolved."""
    docs = str((base / retrieval.docs).resolve()) if retrieval.docs else ""
    return msgspec.structs.replace(retrieval, docs=docs, url=_sqlite_resolved(retrieval.url, base))


def with_source_url(source: SourceSection, base: Path) -> SourceSection:
    """The source with a relative ``sqlite:///FILE`` url made absolute (like job.database)."""
    return msgspec.structs.replace(source, url=_sqlite_resolved(source.url, base))


def _sqlite_resolved(url: str, base: Path) -> str:
    """A ``sqlite:///FILE`` url with a relative FILE resolved against ``base``; any other
    url as it is."""
    scheme, _, rest = url.partition("://")
    if scheme.split("+", 1)[0] != "sqlite" or not rest.startswith("/") or rest == "/:memory:":
        return url
    file = rest[1:]
    if file and not file.startswith("/"):
        return f"{scheme}:///{(base / file).resolve()}"
    return url


MAX_PORT = 65_535


def check_server_address(rest: str) -> None:
    """The host and port of a server URL's ``rest`` (after ``scheme://``) can be read: an
    IPv6 host's bracket closed, the port a number from 1 to 65535. The message never repeats
    the URL (it may hold a password)."""
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    hostport = netloc.rpartition("@")[2]
    if hostport.startswith("["):
        _, closed, after = hostport[1:].partition("]")
        if not closed:
            raise KeyRefused("job.database", "the host's '[' is never closed (write [::1]:5432)")
        if after and not after.startswith(":"):
            raise KeyRefused("job.database", f"{after!r} after the host's ']' is not a :port")
        port = after[1:]
    else:
        if "[" in hostport or "]" in hostport:
            raise KeyRefused("job.database", "a '[' or ']' outside an IPv6 host in [brackets]")
        port = hostport.partition(":")[2]
        if "," in hostport:
            raise KeyRefused("job.database", "one host only (several hosts are not supported)")
    if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= MAX_PORT):
        # not repeated: with the '@' forgotten, the "port" is the password
        raise KeyRefused("job.database", f"the port is not a number from 1 to {MAX_PORT}")


def database_url(url: str, base: Path) -> str:
    """``[job] database`` with the async driver named and a relative SQLite file resolved."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise KeyRefused("job.database", f"{url!r} is not a database URL")
    dialect = scheme.split("+", 1)[0]
    if dialect == "sqlite":
        if rest.startswith("/") and rest != "/:memory:":
            file, _, options = rest[1:].partition("?")
            if not file.strip():  # "sqlite:///" would be an in-memory database, lost at exit
                raise KeyRefused("job.database", "write sqlite:///FILE (no file named)")
            if not file.startswith("/"):
                file = str((base / file).resolve())
            if options:  # SQLite's URI options, e.g. ?mode=ro (https://www.sqlite.org/uri.html)
                return f"sqlite+aiosqlite:///file:{quote(file)}?{options}&uri=true"
            return f"sqlite+aiosqlite:///{file}"
        raise KeyRefused("job.database", "write sqlite:///FILE")
    if dialect in ("postgresql", "postgres"):
        check_server_address(rest)
        return f"postgresql+asyncpg://{rest}"
    raise KeyRefused("job.database", f"{dialect!r} is not supported (sqlite, postgresql)")
