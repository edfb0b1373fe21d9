"""The Python API: a job's results in a notebook or a program, on the record stream that
``ground export`` writes (the same records, fields and types: ``docs/exports.md``).

    import pipeline

    job = pipeline.open_job("jobs/demo.toml")
    for record in job.records(state="done"):
        ...
    frame = job.to_pandas()  # pip install 'ground[pandas]'

The surface is small on purpose, and stays: :func:`open_job`, :class:`Job` (``records``,
``to_arrow``, ``to_pandas``, ``to_polars``, ``status``, ``precision``, ``name``, ``path``)
and :class:`JobUnavailable`. ``docs/python-api.md`` shows it at work.

* **Read-only.** The job's database is opened as ``ground status`` and ``ground export`` open
  it (a read-only file is read as it is), but never migrated nor written: a database at an
  older schema is refused with the command that migrates it.
* **Memory stays flat.** ``records()`` reads :data:`BATCH_QUESTIONS` questions at a time and
  yields their records one by one; ``to_arrow()`` is a stream of Arrow record batches
  (``pyarrow.RecordBatchReader``), one per batch read. ``to_pandas()`` and ``to_polars()``
  build one frame, so they hold the whole result.
* **Synchronous**, in a notebook too: each call runs the store's async reads on an event loop
  of its own, in a worker thread (anyio's blocking portal), so a Jupyter kernel's running loop
  is no obstacle.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncGenerator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyio.from_thread import BlockingPortal, start_blocking_portal
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.errors import GroundError
from pipeline.job.spec import JobSpec, load_jobspec
from pipeline.job.states import QuestionState
from pipeline.results import export
from pipeline.results.export.arrow import ArrowBatches, pyarrow_modules
from pipeline.results.export.structured import structured_shape
from pipeline.results.precision import job_precision, verify_model
from pipeline.store.engine import (
    DatabaseSchemaError,
    create_engine,
    database_problem,
    display_url,
    head_revision,
    is_current,
    read_schema,
    sqlite_file,
)
from pipeline.store.records import Filters

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl
    import pyarrow as pa

__all__ = [
    "BATCH_QUESTIONS",
    "InvalidFilter",
    "Job",
    "JobUnavailable",
    "MissingExtra",
    "as_override",
    "open_job",
]

BATCH_QUESTIONS = 500  # questions read per round trip to the database

# Nullable pandas dtypes, so that a missing count stays <NA> and a flag stays a boolean (the
# strings are pandas' own ``str``, the enums ``category``, timestamps ``datetime64[us, UTC]``).
_PANDAS_DTYPES = ("Int32", "Int64", "boolean", "Float64")


class JobUnavailable(GroundError, RuntimeError):
    """The job's results cannot be read: no database yet, the job not loaded, a schema this
    ``ground`` does not read as it is (the message says which command fixes it), or the
    database failing while it is read."""


class InvalidFilter(GroundError, ValueError):
    """A filter ground cannot apply: a state that is no state, an instant that is none."""


class MissingExtra(GroundError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs
    it."""


def as_override(key: str, value: Any) -> str:
    """``section.key=value`` as ``--set`` takes it (the value a TOML literal). ``section__key``
    is accepted for ``section.key``, so that overrides can be keyword arguments."""
    name = key.replace("__", ".", 1) if "." not in key else key
    literal = json.dumps(value, ensure_ascii=False)  # JSON's literals are TOML's too
    return f"{name}={literal}"


def open_job(path: str | Path, **overrides: Any) -> Job:
    """The job defined by the job file ``path``, ready to read.

    ``overrides`` change the job file's settings as ``--set`` does: ``section.key=value``,
    given as ``**{"job.database": "sqlite:///elsewhere.sqlite"}`` or as
    ``job__database="sqlite:///elsewhere.sqlite"``.

    Raises :class:`pipeline.job.spec.JobSpecError` (a ``ValueError``) for a job file that
    cannot be used, and :class:`JobUnavailable` when its results cannot be read. Every error
    the API raises on purpose is a :class:`pipeline.GroundError`.
    """
    spec = load_jobspec(path, [as_override(k, v) for k, v in overrides.items()])
    job = Job(spec)
    with job._session():  # fails now, not at the first read, when it cannot be read
        pass
    return job


@dataclass(frozen=True, slots=True)
class _Opened:
    portal: BlockingPortal
    engine: AsyncEngine
    job_id: int


def _check_file(spec: JobSpec) -> None:
    """A SQLite job's file exists: opening a missing one would create it."""
    path = sqlite_file(spec.database_url)
    if path is not None and not Path(path).exists():
        raise JobUnavailable(
            f"job {spec.name!r} has not been loaded or run yet (no database at {path})"
        )


async def _open(spec: JobSpec) -> tuple[AsyncEngine, int]:
    """An engine on the job's database, checked (schema current, job there), and the job's
    id; nothing is written."""
    from pipeline.store import queue

    engine = create_engine(spec.database_url, read_only=True)
    where = display_url(spec.database_url)
    try:
        async with engine.connect() as connection:
            state = await read_schema(connection)
            if not state.has_tables:
                raise JobUnavailable(
                    f"job {spec.name!r} has not been loaded or run yet (no ground tables in"
                    f" {where})"
                )
            if not is_current(state):
                at = state.revisions[0] if state.revisions else "none"
                raise JobUnavailable(
                    f"the database {where} is at schema revision {at!r}; this ground"
                    f" reads {head_revision()!r}. Run `ground migrate {spec.path}` to bring it"
                    " up to date (the Python API only reads: it never migrates)"
                )
            job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            raise JobUnavailable(f"job {spec.name!r} has not been loaded or run yet")
    except DatabaseSchemaError as exc:
        await engine.dispose()
        raise JobUnavailable(f"{where}: {exc}") from None
    except (OSError, DBAPIError) as exc:
        await engine.dispose()
        raise JobUnavailable(database_problem(spec.database_url, exc)) from None
    except BaseException:
        await engine.dispose()
        raise
    return engine, job_id


def _states(state: str | Iterable[str] | None) -> tuple[str, ...]:
    if state is None:
        return ()
    wanted = (state,) if isinstance(state, str) else tuple(state)
    known = {str(s) for s in QuestionState}
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise InvalidFilter(
            f"state {unknown[0]!r} is not one of {', '.join(str(s) for s in QuestionState)}"
        )
    return wanted


def _instant(since: dt.datetime | str | None) -> dt.datetime | None:
    """An aware instant; a naive one (or ISO text without an offset) is taken as UTC."""
    if since is None:
        return None
    try:
        value = dt.datetime.fromisoformat(since) if isinstance(since, str) else since
    except ValueError:
        raise InvalidFilter(f"since {since!r} is not an ISO 8601 instant") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


class Job:
    """One job's results, read-only. Made by :func:`open_job`.

    The filters of :meth:`records`, :meth:`to_arrow`, :meth:`to_pandas` and :meth:`to_polars`
    are ``ground export``'s: ``state`` (one state or several), ``cls`` (the question class),
    ``since`` (questions updated at or after this instant; naive means UTC) and
    ``all_versions`` (one record per stored answer version, with its version fields and its
    own calls and cost).
    """

    def __init__(self, spec: JobSpec) -> None:
        self._spec = spec

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def path(self) -> Path:
        """The job file."""
        return self._spec.path

    def __repr__(self) -> str:
        return f"<Job {self.name!r} from {self.path}>"

    @contextmanager
    def _session(self) -> Iterator[_Opened]:
        _check_file(self._spec)
        with start_blocking_portal() as portal:
            engine, job_id = portal.call(_open, self._spec)
            try:
                yield _Opened(portal, engine, job_id)
            except (OSError, DBAPIError) as exc:  # the database failed while it was read
                raise JobUnavailable(database_problem(self._spec.database_url, exc)) from None
            finally:
                portal.call(engine.dispose)

    def _batches(self, filters: Filters) -> Iterator[list[dict[str, Any]]]:
        """The records, a batch at a time, read on the session's event loop."""
        with self._session() as opened:
            stream = export.record_batches(
                opened.engine,
                opened.job_id,
                filters,
                batch_size=BATCH_QUESTIONS,
                verification=export.Verification(verify_model(self._spec)),
            )

            async def next_batch(
                stream: AsyncGenerator[list[dict[str, Any]], None] = stream,
            ) -> list[dict[str, Any]] | None:
                try:
                    return await anext(stream)
                except StopAsyncIteration:
                    return None

            try:
                while (batch := opened.portal.call(next_batch)) is not None:
                    yield batch
            finally:
                opened.portal.call(stream.aclose)

    @staticmethod
    def _filters(
        state: str | Iterable[str] | None,
        cls: str | None,
        since: dt.datetime | str | None,
        all_versions: bool,
    ) -> Filters:
        return Filters(
            states=_states(state),
            qclass=cls,
            since=_instant(since),
            all_versions=all_versions,
        )

    def records(
        self,
        state: str | Iterable[str] | None = None,
        cls: str | None = None,
        since: dt.datetime | str | None = None,
        *,
        all_versions: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """The job's records, one dict per question in input order, as ``ground export``
        writes them (timestamps are aware UTC ``datetime`` values). Memory stays flat: the
        questions are read :data:`BATCH_QUESTIONS` at a time as the iterator is consumed."""
        filters = self._filters(state, cls, since, all_versions)
        for batch in self._batches(filters):
            yield from batch

    def _structured(self) -> Any:
        schema = self._spec.schema
        return None if schema is None else structured_shape(schema.validation_schema)

    def to_arrow(
        self,
        state: str | Iterable[str] | None = None,
        cls: str | None = None,
        since: dt.datetime | str | None = None,
        *,
        all_versions: bool = False,
    ) -> pa.RecordBatchReader:
        """The records as a stream of Arrow record batches, typed as the Parquet export is
        (``ground export --schema --format parquet``); ``.read_all()`` makes a table of
        them. Needs pyarrow: ``pip install 'ground[parquet]'``."""
        pa, _ = pyarrow_modules()
        builder = ArrowBatches(self._structured(), versions=all_versions)
        filters = self._filters(state, cls, since, all_versions)

        def batches() -> Iterator[pa.RecordBatch]:
            for records in self._batches(filters):
                builder.add(records)
                batch = builder.flush()
                if batch is not None:
                    yield batch

        return pa.RecordBatchReader.from_batches(builder.schema, batches())

    def to_pandas(
        self,
        state: str | Iterable[str] | None = None,
        cls: str | None = None,
        since: dt.datetime | str | None = None,
        *,
        all_versions: bool = False,
    ) -> pd.DataFrame:
        """The records as a pandas DataFrame, one row per record (``pip install
        'ground[pandas]'``). Dtypes: ``str`` for text, ``category`` for the enums,
        ``Int64``/``Int32``, ``boolean`` and ``Float64`` (nullable: a missing value is
        ``<NA>``), ``datetime64[us, UTC]``, ``object`` for lists and structs (a list is a NumPy
        array, a struct a dict: pyarrow's conversion)."""
        pd = _optional("pandas")
        pa, _ = pyarrow_modules()
        mapping = dict(
            zip(
                (pa.int32(), pa.int64(), pa.bool_(), pa.float64()),
                (pd.api.types.pandas_dtype(name) for name in _PANDAS_DTYPES),
                strict=True,
            )
        )
        table = self.to_arrow(state, cls, since, all_versions=all_versions).read_all()
        return table.to_pandas(types_mapper=mapping.get)

    def to_polars(
        self,
        state: str | Iterable[str] | None = None,
        cls: str | None = None,
        since: dt.datetime | str | None = None,
        *,
        all_versions: bool = False,
    ) -> pl.DataFrame:
        """The records as a Polars DataFrame (``pip install 'ground[polars]'``): the Arrow
        types as Polars has them (``Categorical`` enums, ``Datetime("us", "UTC")``, ``List``
        and ``Struct`` columns)."""
        pl = _optional("polars")
        table = self.to_arrow(state, cls, since, all_versions=all_versions).read_all()
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    def status(self) -> dict[str, Any]:
        """Where the job stands: ``ground status --json``'s document (counts per state,
        answers, grounded, calls, spend, latency, problems ...)."""
        from pipeline.results.status import job_status
        from pipeline.structure.fingerprint import schema_hash

        spec = self._spec

        async def read(engine: AsyncEngine, job_id: int) -> dict[str, Any]:
            async with engine.connect() as connection:
                found = await job_status(
                    connection,
                    job_id,
                    spec.name,
                    schema_hash=schema_hash(spec.schema) if spec.schema is not None else None,
                    exclude_domains=spec.grounding.exclude_domains,
                )
                precision = await job_precision(connection, job_id, verify_model(spec))
            document = found.to_dict()
            if precision is not None:
                document["citation_precision"] = precision.to_dict()
            return document

        with self._session() as opened:
            return opened.portal.call(read, opened.engine, opened.job_id)

    def precision(self) -> dict[str, Any] | None:
        """The citation precision ``ground verify`` measured, read from the stored verdicts
        (no model is called): ``ground status --json``'s ``citation_precision``, the job's
        and each class's (``precision``, its 95 % Wilson interval ``ci95_low``/``ci95_high``,
        ``supported``/``readable``/``checked`` pairs, the count of each verdict, the answers
        checked and verified). None when no verdict is stored. Each record carries its
        answer's own: ``verified_fraction``, ``verified`` and ``citation_verdicts``."""
        model = verify_model(self._spec)

        async def read(engine: AsyncEngine, job_id: int) -> dict[str, Any] | None:
            async with engine.connect() as connection:
                found = await job_precision(connection, job_id, model)
            return None if found is None else found.to_dict()

        with self._session() as opened:
            return opened.portal.call(read, opened.engine, opened.job_id)


_EXTRAS = {"pandas": "ground[pandas]", "polars": "ground[polars]"}


def _optional(module: str) -> Any:
    """An optional dependency, or :class:`MissingExtra` naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(f"{module} is not installed: pip install '{_EXTRAS[module]}'") from None
