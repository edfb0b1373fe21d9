"""The job file (TOML) -> a frozen, validated :class:`JobSpec`.

The file is decoded into the sections of :mod:`pipeline.job.sections` (types, defaults and
per-key limits); the rules that span keys or sections (which tools on which backend, a schema
file that must parse, paths made absolute) are checked here.

Every error names the file and the key (``jobs/demo.toml: limits.concurrency: Expected `int`
>= 1, got 0``) and is raised as :class:`JobSpecError`; the CLI turns it into exit status 2.
Unknown keys are errors, never silently ignored: a typo in a nightly job must not quietly fall
back to a default.

Relative paths in the file (the question file, a SQLite database) are resolved against the
directory holding the job file, so a job runs the same from any working directory.

``--set section.key=value`` overrides are applied to the parsed TOML before validation, so an
override is checked exactly like the file; its value is read as a TOML value when it parses as
one (``5``, ``true``, ``"x"``, ``[1, 2]``) and as a plain string otherwise.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import re
import resource
import stat
import tomllib
import warnings
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgspec

from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.errors import GroundError
from pipeline.gemini.endpoint import backend_from_env
from pipeline.gemini.vertex_batch_wire import parse_gs_uri
from pipeline.job.datastore import location_warning, search_location
from pipeline.job.sections import (
    FAIL_ON_SOURCES,
    FAIL_ON_STATES,
    MAX_CONCURRENCY,
    BatchSection,
    GroundingSection,
    JobSection,
    LimitsSection,
    ModelSection,
    RawJob,
    RefreshSection,
    ResolverSection,
    RetrievalSection,
    SourceSection,
    StructureSection,
)
from pipeline.structure import PreparedSchema, SchemaError, prepare_schema_file

# Tools that need one backend (Vertex `Tool` vs Gemini v1beta `Tool`:
# ``docs/wire-format.md`` "Tool declarations").
VERTEX_ONLY_TOOLS = frozenset(
    {"enterprise_web_search", "vertex_ai_search", "elasticsearch", "vertex_rag_store"}
)
DEVELOPER_ONLY_TOOLS = frozenset({"file_search"})
# Tools that must be declared alone: the legacy retrieval tool (400 beside `retrieval` on
# Vertex), Vertex AI Search (Vertex rejects search tools mixed with RAG retrieval) and File
# Search (its docs say it cannot be combined with other tools; unconfirmed).
SOLO_TOOLS = frozenset(
    {"google_search_retrieval", "vertex_ai_search", "file_search", "vertex_rag_store"}
)
# Vertex resource names the connectors take (google/cloud/aiplatform/v1/tool.proto).
_RAG_CORPUS = re.compile(r"^projects/[^/]+/locations/[^/]+/ragCorpora/[^/]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The legacy tool is for Gemini 1.5 only; 2.0 and 3 answer it with a 400
# (``docs/wire-format.md`` "Tool declarations").
LEGACY_RETRIEVAL_MODELS = ("gemini-1.5-",)
GCS_KEYS = ("gcs_input", "gcs_output", "gcs_endpoint")  # [batch] keys for Vertex batch only

log = logging.getLogger(__name__)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}  # seconds
# The longest age a refresh takes: older than every stored answer, and still a date (a
# timedelta of thousands of years would overflow the clock arithmetic).
MAX_DURATION_S = 100 * 365 * 86_400  # seconds (100 years)
# File descriptors a process keeps besides its calls' and the resolver's connections: the
# database (a pool of up to 20 on PostgreSQL), stdio, logs, the metrics server, the files it
# reads and writes.
RESERVED_FILES = 64  # file descriptors
# The shortest question (one character): the smallest call a job makes is built around it.
SHORTEST_QUESTION = "?"


def parse_duration(text: str) -> dt.timedelta:
    """``"7d"``, ``"12h"``, ``"90m"``, ``"30s"``, ``"2w"`` -> a positive timedelta, up to
    :data:`MAX_DURATION_S`.

    Raises ValueError saying what is accepted."""
    found = _DURATION.match(text)
    if found is None or float(found.group(1)) <= 0:
        raise ValueError(
            f"{text!r} is not a duration: a positive number and a unit, s m h d or w (e.g. 7d)"
        )
    seconds = float(found.group(1)) * _DURATION_UNITS[found.group(2)]
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{text!r} is longer than 100 years: a typo?")
    return dt.timedelta(seconds=seconds)


# Redirects to resolve per answer when sizing the resolver automatically: real answers carry
# up to ~5 web sources (several dozen are possible), so keep well ahead of the answer rate.
RESOLVES_PER_ANSWER = 8


def _sized(resolver: ResolverSection, requests_per_minute: int) -> ResolverSection:
    """The resolver's rate and concurrency, with the automatic (0) ones worked out."""
    rate = resolver.requests_per_second or max(20.0, requests_per_minute / 60 * RESOLVES_PER_ANSWER)
    concurrency = resolver.concurrency or int(min(256, max(16, rate / 4)))
    return msgspec.structs.replace(resolver, requests_per_second=rate, concurrency=concurrency)


class JobSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A validated job: the sections plus where it came from."""

    path: Path
    job: JobSection
    source: SourceSection
    model: ModelSection
    grounding: GroundingSection
    limits: LimitsSection
    resolver: ResolverSection
    structure: StructureSection
    database_url: str  # resolved, with the async driver named
    source_path: Path  # resolved
    schema: PreparedSchema | None  # call 2's schema, prepared and checked; None when disabled
    budget: Decimal | None  # [limits] budget_usd as an exact amount; None = no budget
    refresh: RefreshSection = RefreshSection()
    batch: BatchSection = BatchSection()
    # What loaded but deserves a look (a data store outside locations/global), logged at load.
    warnings: tuple[str, ...] = ()
    # [retrieval], its docs path made absolute and its sqlite url relative to the job file
    retrieval: RetrievalSection = RetrievalSection()

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def reuse_within(self) -> dt.timedelta | None:
        """``[job] reuse_answers_within`` (checked at load); None: no reuse."""
        w = self.job.reuse_answers_within
        return parse_duration(w) if w else None

    @property
    def refresh_max_age(self) -> dt.timedelta | None:
        """``[refresh] max_age`` (checked at load); None: no refresh."""
        return parse_duration(self.refresh.max_age) if self.refresh.max_age else None


class JobSpecError(GroundError, ValueError):
    """A job file that cannot be used; the message names the file and the key."""


def load_jobspec(
    path: str | Path, overrides: Iterable[str] = (), *, env: Mapping[str, str] | None = None
) -> JobSpec:
    """Read, override and validate a job file. Without ``[model] backend`` (file or
    override), the backend comes from ``env`` (default: the process environment) as Google's
    SDK reads it (:func:`pipeline.gemini.endpoint.backend_from_env`)."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JobSpecError(f"{path}: no such job file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise JobSpecError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise JobSpecError(f"{path}: not valid TOML: {exc}") from None
    for override in overrides:
        _apply_override(raw, override, path)
    _backend_from_env(raw, os.environ if env is None else env)
    _check_finite(path, raw)
    try:
        parsed = msgspec.convert(raw, RawJob)
    except msgspec.ValidationError as exc:
        raise JobSpecError(f"{path}: {_describe(exc, raw)}") from None
    spec = _finish(path, parsed)
    for warning in spec.warnings:
        log.warning("%s: %s", path, warning, extra={"action": "job_warning", "job": spec.name})
    return spec


def _backend_from_env(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    """``[model] backend`` from the SDK's variables when the file (and --set) leave it out."""
    model = raw.get("model")
    if isinstance(model, dict) and "backend" in model:
        return
    backend = backend_from_env(env)
    if backend is not None:
        raw["model"] = {**(model if isinstance(model, dict) else {}), "backend": backend}


def _check_finite(path: Path, value: Any, key: str = "") -> None:
    """Every number in the file is finite: TOML spells ``inf`` and ``nan``, and neither means
    anything as a budget, a rate or a timeout (``nan`` even passes every comparison)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise JobSpecError(f"{path}: {key}: {value} is not a finite number")
    if isinstance(value, dict):
        for name, item in value.items():
            _check_finite(path, item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for item in value:
            _check_finite(path, item, key)


def _apply_override(raw: dict[str, Any], override: str, path: Path) -> None:
    key, sep, text = override.partition("=")
    section, dot, name = key.strip().partition(".")
    if not sep or not dot or not section or not name or "." in name:
        raise JobSpecError(f"{path}: --set {override!r}: expected section.key=value")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    target = raw.setdefault(section, {})
    if not isinstance(target, dict):
        raise JobSpecError(f"{path}: --set {override!r}: [{section}] is not a table")
    target[name] = value


_AT_MOST = re.compile(r"^Expected `(?:int|float)` <= (\S+)$")
# Why a key's largest value is what it is, where the bound alone does not say.
_BOUND_REASONS = {
    "limits.concurrency": "calls in flight in one process; for more, run more processes"
    " (ground worker --processes N)",
}


def _describe(exc: msgspec.ValidationError, raw: dict[str, Any]) -> str:
    """Turn msgspec's "... - at `$.limits.concurrency`" into "limits.concurrency: ..."."""
    message = str(exc)
    reason, sep, where = message.rpartition(" - at `$")
    if not sep:
        reason, where = message, ""
    key = where.rstrip("`").lstrip(".")
    prefix = f"{key}." if key else ""
    if reason.startswith("Object contains unknown field"):
        return f"{prefix}{reason.split('`')[1]}: unknown key"
    if reason.startswith("Object missing required field"):
        return f"{prefix}{reason.split('`')[1]}: required key is missing"
    bound = _AT_MOST.match(reason)
    if bound is not None and key:
        section, _, name = key.partition(".")
        value = raw.get(section, {}).get(name) if isinstance(raw.get(section), dict) else None
        largest = float(bound.group(1))
        why = _BOUND_REASONS.get(key, "more is a typo or a unit mistake")
        shown = f"{value:g}" if isinstance(value, float) else repr(value)
        return f"{key}: {shown} is more than this key takes: at most {largest:,g} ({why})"
    return f"{key}: {reason}" if key else reason


def _finish(path: Path, parsed: RawJob) -> JobSpec:
    """The cross-key rules, in the order their errors are reported; then the spec, with its
    paths resolved against the job file's directory."""
    base = path.parent
    _check_fail_on(path, parsed.job)
    _check_source(path, parsed.source)
    source_path = _source_path(path, parsed.source, base)
    _check_calls(path, parsed)
    _check_gcs(path, parsed)
    resolver = _sized(parsed.resolver, parsed.limits.requests_per_minute)
    _check_concurrency(path, parsed, resolver)
    _check_allow_hosts(path, parsed.resolver)
    schema = _prepared_schema(path, parsed.structure, base)
    _check_refresh(path, parsed.refresh)
    _check_reuse(path, parsed.job)
    _check_retrieval(path, parsed)
    limits = _checked_prices(path, parsed.limits, base)
    budget = limits.budget_usd
    spec = JobSpec(
        path=path,
        job=parsed.job,
        model=parsed.model,
        grounding=parsed.grounding,
        limits=limits,
        resolver=resolver,
        structure=parsed.structure,
        database_url=_database_url(path, parsed.job.database, base),
        source=_with_source_url(parsed.source, base),
        source_path=source_path,
        schema=schema,
        budget=Decimal(str(budget)) if budget else None,
        refresh=parsed.refresh,
        batch=parsed.batch,
        warnings=_search_warnings(parsed.grounding),
        retrieval=_resolved_retrieval(parsed.retrieval, base),
    )
    _check_token_limit(spec)
    return spec


def _checked_prices(path: Path, limits: LimitsSection, base: Path) -> LimitsSection:
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
        raise JobSpecError(f"{path}: limits.prices_file: {exc}") from None
    return msgspec.structs.replace(limits, prices_file=str(prices))


def _check_fail_on(path: Path, job: JobSection) -> None:
    for state in job.fail_on:
        if state not in FAIL_ON_STATES and state not in FAIL_ON_SOURCES:
            raise JobSpecError(
                f"{path}: job.fail_on: {state!r} is not a failure state"
                f" (any of {', '.join((*FAIL_ON_STATES, *FAIL_ON_SOURCES))})"
            )


def _source_path(path: Path, source: SourceSection, base: Path) -> Path:
    """``[source] file`` resolved against ``base``; a directory, a device or a pipe is refused
    (the file is read twice, once to check every row, and fingerprinted by its size)."""
    source_path = (base / source.file).resolve()
    if not source.file.strip():
        return source_path
    try:
        mode = source_path.stat().st_mode
    except OSError:
        return source_path  # a missing file is the loader's to name, with the run's context
    kind = not_a_file(mode)
    if kind is not None:
        raise JobSpecError(
            f"{path}: source.file: {source.file!r} is {kind}, not a question file"
            " (a JSONL or CSV file)"
        )
    return source_path


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


def _check_calls(path: Path, parsed: RawJob) -> None:
    """What the calls will send: the prompt, the grounding tools, the mode and the endpoint."""
    model = parsed.model
    if "{question}" not in model.prompt_template:
        raise JobSpecError(f"{path}: model.prompt_template: must contain {{question}}")
    _check_grounding(path, parsed)
    if model.mode == "batch" and model.backend == "vertex":
        # Vertex batch prediction reads its input from and writes its output to Cloud Storage.
        for key in ("gcs_input", "gcs_output"):
            if not getattr(parsed.batch, key):
                raise JobSpecError(
                    f"{path}: batch.{key}: required for Vertex batch prediction"
                    ' (model.backend = "vertex", model.mode = "batch"): gs://BUCKET/PREFIX'
                )
    if model.base_url and not model.base_url.startswith(("http://", "https://")):
        raise JobSpecError(f"{path}: model.base_url: must start with http:// or https://")


def _check_gcs(path: Path, parsed: RawJob) -> None:
    """``[batch] gcs_*``: Vertex only; ``gs://`` URIs and an ``http(s)://`` endpoint."""
    b = parsed.batch
    for key in GCS_KEYS:
        if getattr(b, key) and parsed.model.backend != "vertex":
            raise JobSpecError(
                f'{path}: batch.{key}: only for Vertex batch prediction (model.backend = "vertex")'
            )
    for key in ("gcs_input", "gcs_output"):
        value = getattr(b, key)
        if value:
            try:
                parse_gs_uri(value)
            except ValueError as exc:
                raise JobSpecError(f"{path}: batch.{key}: {exc}") from None
    if b.gcs_endpoint and not b.gcs_endpoint.startswith(("http://", "https://")):
        raise JobSpecError(f"{path}: batch.gcs_endpoint: must start with http:// or https://")


def _search_warnings(g: GroundingSection) -> tuple[str, ...]:
    """The ``vertex_ai_search`` resource's location, when it is not ``global``."""
    if "vertex_ai_search" not in g.tools:
        return ()
    kind, value = ("datastore", g.datastore) if g.datastore else ("engine", g.engine)
    warning = location_warning(search_location(value, kind), f"grounding.{kind}")
    return (warning,) if warning else ()


def _check_concurrency(path: Path, parsed: RawJob, resolver: ResolverSection) -> None:
    """No more calls in flight than this process may open connections for."""
    limits = parsed.limits
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    lookups = resolver.concurrency if resolver.enabled else 0
    ceiling = concurrency_ceiling(open_files, lookups)
    if limits.concurrency > ceiling:
        raise JobSpecError(
            f"{path}: limits.concurrency: {limits.concurrency} calls in flight need as many"
            f" connections, and this process may open {open_files} files (ulimit -n), of"
            f" which the resolver takes {lookups} and {RESERVED_FILES} are kept for the"
            f" database and logs: at most {max(ceiling, 0)} here; raise `ulimit -n`, or run"
            " more processes (ground worker --processes N)"
        )


def _check_token_limit(spec: JobSpec) -> None:
    """A token limit below the smallest call could never let one through."""
    tokens_per_minute = spec.limits.tokens_per_minute
    if not tokens_per_minute:
        return
    smallest = smallest_call_tokens(spec)
    if tokens_per_minute < smallest:
        raise JobSpecError(
            f"{spec.path}: limits.tokens_per_minute: {tokens_per_minute} is below the smallest"
            f" call this job makes: {smallest} tokens, as the limiter estimates a request (its"
            " prompt template, system instruction and tools around a one-character question),"
            f" so no call would ever fit; set at least {smallest}, or 0 for no limit"
        )


def smallest_call_tokens(spec: JobSpec) -> int:
    """The tokens the token limiter reserves for this job's smallest call 1: the estimate
    (:func:`pipeline.limits.estimate_tokens`) of its whole request, around a one-character
    question, as the online call estimates every request before sending it."""
    from pipeline.job.calls import request_builder
    from pipeline.limits.tokens import estimate_tokens

    return estimate_tokens(request_builder(spec).body(SHORTEST_QUESTION).decode())


def concurrency_ceiling(open_files: int, lookups: int) -> int:
    """The most calls in flight one process can hold: a connection each, within its open-file
    limit (``RLIM_INFINITY`` is negative: no limit), beside ``lookups`` resolver connections
    and :data:`RESERVED_FILES`; never above :data:`MAX_CONCURRENCY`."""
    if open_files < 0:
        return MAX_CONCURRENCY
    return min(MAX_CONCURRENCY, open_files - lookups - RESERVED_FILES)


def _check_allow_hosts(path: Path, resolver: ResolverSection) -> None:
    for host in resolver.allow_hosts:
        if not host or "/" in host:
            raise JobSpecError(f"{path}: resolver.allow_hosts: {host!r} is not a host name")


def _prepared_schema(path: Path, structure: StructureSection, base: Path) -> PreparedSchema | None:
    """Call 2's schema file, prepared and checked; None when the structure step is off."""
    if not structure.enabled:
        return None
    if not structure.schema:
        raise JobSpecError(f"{path}: structure.schema: required when structure is enabled")
    try:
        return prepare_schema_file(base / structure.schema, wire_field=structure.wire_field)
    except SchemaError as exc:
        raise JobSpecError(f"{path}: structure.schema: {exc}") from None


def _check_refresh(path: Path, refresh: RefreshSection) -> None:
    if refresh.max_age:
        try:
            parse_duration(refresh.max_age)
        except ValueError as exc:
            raise JobSpecError(f"{path}: refresh.max_age: {exc}") from None


def _check_reuse(path: Path, job: JobSection) -> None:
    if job.reuse_answers_within:
        try:
            parse_duration(job.reuse_answers_within)
        except ValueError as exc:
            raise JobSpecError(f"{path}: job.reuse_answers_within: {exc}") from None


def _check_grounding(path: Path, parsed: RawJob) -> None:
    """The ``[grounding]`` rules no type can say (which tools, together, on which backend and
    model); each error names the file and the key."""
    g, backend, model = parsed.grounding, parsed.model.backend, parsed.model.name
    tools = g.tools
    if not tools:
        raise JobSpecError(f"{path}: grounding.tool: name at least one tool")
    if len(set(tools)) != len(tools):
        raise JobSpecError(f"{path}: grounding.tool: a tool is listed twice")
    for tool in tools:
        if tool in VERTEX_ONLY_TOOLS and backend != "vertex":
            raise JobSpecError(f'{path}: grounding.tool: {tool} needs model.backend = "vertex"')
        if tool in DEVELOPER_ONLY_TOOLS and backend != "developer":
            raise JobSpecError(
                f'{path}: grounding.tool: {tool} needs model.backend = "developer"'
                " (File Search stores belong to the Gemini Developer API)"
            )
        if tool in SOLO_TOOLS and len(tools) > 1:
            raise JobSpecError(
                f"{path}: grounding.tool: {tool} cannot be combined with other tools"
            )
    if "google_search" in tools and "enterprise_web_search" in tools:
        raise JobSpecError(
            f"{path}: grounding.tool: google_search and enterprise_web_search are alternatives"
        )
    if "google_search_retrieval" in tools and not model.startswith(LEGACY_RETRIEVAL_MODELS):
        raise JobSpecError(
            f"{path}: grounding.tool: google_search_retrieval is for Gemini 1.5 models only"
            f" ({model!r} rejects it); use google_search instead"
        )
    if g.dynamic_threshold and "google_search_retrieval" not in tools:
        raise JobSpecError(
            f"{path}: grounding.dynamic_threshold: only for google_search_retrieval"
            " (Gemini 1.5); google_search decides by itself when to search"
        )
    _check_grounding_keys(path, parsed)


def _check_grounding_keys(path: Path, parsed: RawJob) -> None:
    """Each tool's own keys: given for that tool, and only for it."""
    g, backend, tools = parsed.grounding, parsed.model.backend, parsed.grounding.tools
    if "vertex_ai_search" in tools:
        if bool(g.datastore) == bool(g.engine):
            raise JobSpecError(
                f"{path}: grounding.datastore: vertex_ai_search needs a datastore or an engine"
                " (one of them)"
            )
        kind, value = ("datastore", g.datastore) if g.datastore else ("engine", g.engine)
        try:
            search_location(value, kind)
        except ValueError as exc:
            raise JobSpecError(f"{path}: grounding.{kind}: {exc}") from None
    elif g.datastore or g.engine or g.filter or g.max_results:
        key = next(k for k in ("datastore", "engine", "filter", "max_results") if getattr(g, k))
        raise JobSpecError(f"{path}: grounding.{key}: only for vertex_ai_search")
    if g.exclude_domains:
        if backend != "vertex":
            raise JobSpecError(f"{path}: grounding.exclude_domains: Vertex only")
        if not {"google_search", "enterprise_web_search"} & set(tools):
            raise JobSpecError(
                f"{path}: grounding.exclude_domains: only for google_search or"
                " enterprise_web_search"
            )
    if ("file_search" in tools) != bool(g.file_search_stores):
        raise JobSpecError(
            f"{path}: grounding.file_search_stores: "
            + ("required for file_search" if "file_search" in tools else "only for file_search")
        )
    if g.url_field:
        if "url_context" not in tools:
            raise JobSpecError(f"{path}: grounding.url_field: only for url_context")
        if g.url_field not in parsed.source.metadata_fields:
            raise JobSpecError(
                f"{path}: grounding.url_field: {g.url_field!r} must be listed in"
                " source.metadata_fields"
            )
    if g.location:
        if len(g.location) != 2 or not (
            -90 <= g.location[0] <= 90 and -180 <= g.location[1] <= 180
        ):
            raise JobSpecError(
                f"{path}: grounding.location: expected [latitude, longitude] in degrees"
            )
        if "google_maps" not in tools:
            raise JobSpecError(f"{path}: grounding.location: only for google_maps")
    if g.maps_widget and "google_maps" not in tools:
        raise JobSpecError(f"{path}: grounding.maps_widget: only for google_maps")
    _check_connectors(path, g)


def _check_retrieval(path: Path, parsed: RawJob) -> None:
    """``[retrieval]`` and the own-retrieval fallback of ``[grounding]``."""
    r, g = parsed.retrieval, parsed.grounding
    _check_file_or_query(path, "retrieval", "docs", bool(r.docs), r.query, r.url)
    if r.chunk_overlap >= r.chunk_chars:
        raise JobSpecError(f"{path}: retrieval.chunk_overlap: must be less than chunk_chars")
    if r.dense and not r.embedding_model:
        raise JobSpecError(f"{path}: retrieval.embedding_model: required with dense = true")
    if not g.fallback:
        for key in ("fallback_classes", "fallback_when", "fallback_below"):
            if getattr(g, key):
                raise JobSpecError(f'{path}: grounding.{key}: only with fallback = "own_retrieval"')
        return
    if not r.configured:
        raise JobSpecError(
            f"{path}: grounding.fallback: own_retrieval needs a [retrieval] section with docs"
            " or query (the documents `ground index` loads)"
        )
    if parsed.model.mode == "batch":
        raise JobSpecError(
            f"{path}: grounding.fallback: own retrieval is routed by online runs only;"
            ' use model.mode = "online"'
        )
    if (g.fallback_classes or g.fallback_below) and not parsed.source.class_field:
        key = "fallback_classes" if g.fallback_classes else "fallback_below"
        raise JobSpecError(
            f"{path}: grounding.{key}: needs source.class_field (the questions' class)"
        )
    if any(not c.strip() for c in g.fallback_classes):
        raise JobSpecError(f"{path}: grounding.fallback_classes: a class name is empty")
    if len(set(g.fallback_classes)) != len(g.fallback_classes):
        raise JobSpecError(f"{path}: grounding.fallback_classes: a class is listed twice")
    if not (g.fallback_classes or g.fallback_when or g.fallback_below):
        raise JobSpecError(
            f"{path}: grounding.fallback: say when: fallback_classes, fallback_when ="
            ' "ungrounded", or fallback_below'
        )


def _resolved_retrieval(retrieval: RetrievalSection, base: Path) -> RetrievalSection:
    """``[retrieval]`` with its docs path absolute and a relative sqlite url resolved."""
    docs = str((base / retrieval.docs).resolve()) if retrieval.docs else ""
    url = retrieval.url
    scheme, _, rest = url.partition("://")
    if scheme.split("+", 1)[0] == "sqlite" and rest.startswith("/") and rest != "/:memory:":
        file = rest[1:]
        if file and not file.startswith("/"):
            url = f"{scheme}:///{(base / file).resolve()}"
    return msgspec.structs.replace(retrieval, docs=docs, url=url)


def _check_connectors(path: Path, g: GroundingSection) -> None:
    """The keys of the two third-party connectors: given for their tool, and only for it."""
    tools = g.tools
    es_keys = (
        "elasticsearch_endpoint",
        "elasticsearch_index",
        "elasticsearch_search_template",
        "elasticsearch_num_hits",
        "elasticsearch_api_key_env",
    )
    if "elasticsearch" in tools:
        for key in es_keys[:3]:
            if not getattr(g, key):
                raise JobSpecError(f"{path}: grounding.{key}: required for elasticsearch")
        if not g.elasticsearch_endpoint.startswith(("https://", "http://")):
            raise JobSpecError(
                f"{path}: grounding.elasticsearch_endpoint: must start with https:// (the"
                " cluster Vertex AI calls)"
            )
        if g.elasticsearch_api_key_env and not _ENV_NAME.match(g.elasticsearch_api_key_env):
            raise JobSpecError(
                f"{path}: grounding.elasticsearch_api_key_env: the name of an environment"
                " variable (the key itself never goes in the job file)"
            )
    else:
        for key in es_keys:
            if getattr(g, key):
                raise JobSpecError(f"{path}: grounding.{key}: only for elasticsearch")
    rag_keys = ("rag_corpus", "rag_file_ids", "rag_top_k", "rag_vector_distance_threshold")
    if "vertex_rag_store" in tools:
        if not _RAG_CORPUS.match(g.rag_corpus):
            raise JobSpecError(
                f"{path}: grounding.rag_corpus: vertex_rag_store needs a corpus,"
                " projects/PROJECT/locations/LOCATION/ragCorpora/CORPUS"
            )
    else:
        for key in rag_keys:
            if getattr(g, key):
                raise JobSpecError(f"{path}: grounding.{key}: only for vertex_rag_store")


def _check_source(path: Path, source: SourceSection) -> None:
    if not source.file.strip() and not source.query.strip():
        raise JobSpecError(f"{path}: source: give either file or query (with url); neither is set")
    _check_file_or_query(
        path, "source", "file", bool(source.file.strip()), source.query, source.url
    )


def _check_file_or_query(
    path: Path, section: str, file_key: str, file_given: bool, query: str, url: str
) -> None:
    """A section read from a file (``file_key``) or from ``query`` on the database at ``url``."""
    if file_given and query.strip():
        raise JobSpecError(
            f"{path}: {section}: give either {file_key} or query (with url), not both"
        )
    if query and not url:
        raise JobSpecError(f"{path}: {section}.url: required with {section}.query")
    if url and not query:
        raise JobSpecError(f"{path}: {section}.url: only used with {section}.query")
    if query and "://" not in url:
        raise JobSpecError(f"{path}: {section}.url: {url!r} is not a database URL")


def _with_source_url(source: SourceSection, base: Path) -> SourceSection:
    """The source with a relative ``sqlite:///FILE`` url made absolute (like job.database)."""
    scheme, _, rest = source.url.partition("://")
    if scheme.split("+", 1)[0] != "sqlite" or not rest.startswith("/") or rest == "/:memory:":
        return source
    file = rest[1:]
    if file and not file.startswith("/"):
        file = str((base / file).resolve())
    return msgspec.structs.replace(source, url=f"{scheme}:///{file}")


def _database_url(path: Path, url: str, base: Path) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise JobSpecError(f"{path}: job.database: {url!r} is not a database URL")
    dialect = scheme.split("+", 1)[0]
    if dialect == "sqlite":
        if rest.startswith("/") and rest != "/:memory:":
            file, _, options = rest[1:].partition("?")
            if not file.strip():  # "sqlite:///" would be an in-memory database, lost at exit
                raise JobSpecError(f"{path}: job.database: write sqlite:///FILE (no file named)")
            if not file.startswith("/"):
                file = str((base / file).resolve())
            if options:  # SQLite's URI options, e.g. ?mode=ro (https://www.sqlite.org/uri.html)
                return f"sqlite+aiosqlite:///file:{quote(file)}?{options}&uri=true"
            return f"sqlite+aiosqlite:///{file}"
        raise JobSpecError(f"{path}: job.database: write sqlite:///FILE")
    if dialect in ("postgresql", "postgres"):
        return f"postgresql+asyncpg://{rest}"
    raise JobSpecError(f"{path}: job.database: {dialect!r} is not supported (sqlite, postgresql)")
