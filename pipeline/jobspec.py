"""The job file (TOML) -> a frozen, validated :class:`JobSpec`.

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
import re
import tomllib
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from pipeline.states import TERMINAL_STATES, QuestionState
from pipeline.structure import PreparedSchema, SchemaError, prepare_schema_file

DEFAULT_REDIRECT_HOSTS = ("vertexaisearch.cloud.google.com",)
DEFAULT_MAX_QUESTION_CHARS = 1_000_000  # see LimitsSection.max_question_chars

Positive = Annotated[int, msgspec.Meta(ge=1)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
FieldName = Annotated[str, msgspec.Meta(min_length=1)]

# The terminal states other than `done`: those `[job] fail_on` may name.
FAIL_ON_STATES = tuple(
    str(s) for s in QuestionState if s in TERMINAL_STATES and s != QuestionState.DONE
)


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every section: immutable, unknown keys rejected."""


class JobSection(_Section):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    # SQLAlchemy-style URL; "sqlite:///relative/path.sqlite" is relative to the job file.
    database: str = "sqlite:///ground.sqlite"
    # The question states that make a finished run exit 3 (see pipeline.exit_codes); any of
    # FAIL_ON_STATES.
    fail_on: tuple[str, ...] = ("failed", "invalid")
    # Seconds the database may stay unreachable (a restart, a failover) before a run gives up.
    database_outage_s: PositiveFloat = 300.0


class SourceSection(_Section):
    # The questions come from a file (CSV / JSONL) or from a query: exactly one of the two.
    file: str = ""
    # A SELECT run on the database at ``url`` (any SQLAlchemy URL; sqlite:///FILE is relative
    # to the job file); its columns are read like a file's fields.
    query: str = ""
    url: str = ""
    format: Literal["auto", "jsonl", "csv"] = "auto"
    id_field: FieldName = "id"
    text_field: FieldName = "question"
    class_field: str | None = None
    # Extra input fields kept with each question (JSON object); empty = none.
    metadata_fields: tuple[str, ...] = ()


class ModelSection(_Section):
    backend: Literal["developer", "vertex"] = "developer"
    name: str = "gemini-2.5-flash"
    # Empty = Google's endpoint for the backend; set it to point at the emulator.
    base_url: str = ""
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] = 1.0
    system_instruction: str = ""
    # Must contain "{question}"; other placeholders are not expanded.
    prompt_template: str = "{question}"
    request_timeout_s: PositiveFloat = 120.0
    # Vertex only: defaults come from GOOGLE_CLOUD_PROJECT / GOOGLE_CLOUD_LOCATION.
    project: str = ""
    location: str = ""
    # "online": one generateContent per question. "batch": the Gemini Batch API (Developer API
    # only, half the token price, results within 24 h; see [batch] and pipeline.batch_runner).
    mode: Literal["online", "batch"] = "online"


ToolName = Literal[
    "google_search",
    "enterprise_web_search",
    "vertex_ai_search",
    "file_search",
    "url_context",
    "google_maps",
    "google_search_retrieval",
]
# Tools that need one backend (reference §1.4: Vertex `Tool` vs Gemini v1beta `Tool`).
VERTEX_ONLY_TOOLS = frozenset({"enterprise_web_search", "vertex_ai_search"})
DEVELOPER_ONLY_TOOLS = frozenset({"file_search"})
# Tools that must be declared alone: the legacy retrieval tool (400 beside `retrieval` on
# Vertex), Vertex AI Search (Vertex rejects search tools mixed with RAG retrieval) and File
# Search (its docs say it cannot be combined with other tools; unconfirmed in the reference).
SOLO_TOOLS = frozenset({"google_search_retrieval", "vertex_ai_search", "file_search"})
# The legacy tool is for Gemini 1.5 only; 2.0 and 3 answer it with a 400 (reference §1.4).
LEGACY_RETRIEVAL_MODELS = ("gemini-1.5-",)


class GroundingSection(_Section):
    # One tool name or a list of them (several at once where the API allows).
    tool: ToolName | tuple[ToolName, ...] = "google_search"
    # true: an answer without groundingMetadata is asked again with a recency nudge, up to
    # ungrounded_retries times, then kept as `ungrounded` (never presented as grounded).
    required: bool = False
    ungrounded_retries: NonNegative = 2
    # vertex_ai_search: projects/.../dataStores/ID, or an engine (projects/.../engines/ID)
    datastore: str = ""
    engine: str = ""
    filter: str = ""
    max_results: Annotated[int, msgspec.Meta(ge=0, le=10)] = 0  # 0 = the API's default (10)
    # google_search / enterprise_web_search on Vertex: domains left out of the search
    exclude_domains: tuple[str, ...] = ()
    # file_search: fileSearchStores/... names (Developer API File Search stores)
    file_search_stores: tuple[str, ...] = ()
    # url_context: the source field (listed in source.metadata_fields) holding the URL(s)
    url_field: str = ""
    # google_maps: optional [latitude, longitude], sent as toolConfig.retrievalConfig.latLng
    location: tuple[float, ...] = ()
    # google_search_retrieval (Gemini 1.5 only): search only when the model's predicted score
    # reaches this (MODE_DYNAMIC); 0 = always search
    dynamic_threshold: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0

    @property
    def tools(self) -> tuple[str, ...]:
        """The declared tools, in the file's order."""
        return (self.tool,) if isinstance(self.tool, str) else tuple(self.tool)

    @property
    def lat_lng(self) -> tuple[float, float] | None:
        return (self.location[0], self.location[1]) if len(self.location) == 2 else None


class LimitsSection(_Section):
    requests_per_minute: Positive = 60
    # Input tokens per minute (estimated before a call, corrected after it); 0 = no limit.
    tokens_per_minute: NonNegative = 0
    # Grounded prompts per day (the grounding daily bucket); 0 = no limit.
    grounded_prompts_per_day: NonNegative = 0
    # Lower the sending rate on 429s and recover slowly (AIMD), for quotas with no fixed number.
    adaptive: bool = True
    concurrency: Positive = 8
    max_attempts: Positive = 5
    # Seconds a claimed question stays ours without a heartbeat (a crashed run's questions come
    # back after this, or at once when the dead run was on this host).
    lease_s: Annotated[float, msgspec.Meta(ge=5)] = 120.0
    # USD for the whole job (every run); a call whose worst case would exceed what is left is
    # not started. 0 = no budget.
    budget_usd: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    # Sent as generationConfig.maxOutputTokens (thinking included): the worst case of a call.
    max_output_tokens: Positive = 8192
    # Worst-case search queries per grounded call, for per-query grounding fees.
    max_search_queries: Positive = 10
    # Worst-case search-result tokens per grounded call (toolUsePromptTokenCount).
    max_tool_use_tokens: NonNegative = 10_000
    # A prices file in the format of pipeline/prices.toml; "" = the bundled one.
    prices_file: str = ""
    # Questions longer than this (characters) are refused at load, with file:line. The default
    # comes from the input limit of the Gemini 2.x models, 1,048,576 tokens: less room for the
    # prompt template and the search results (max_tool_use_tokens), at the worst case of one
    # token per character (CJK and other scripts come close), rounded down. Every question
    # that loads then fits the model's input, whatever its script.
    max_question_chars: Positive = DEFAULT_MAX_QUESTION_CHARS


class StructureSection(_Section):
    """Call 2: the grounded answer reshaped into the user's JSON schema (no tools)."""

    enabled: bool = False
    # A JSON Schema file (relative to the job file); checked at load, before any call.
    schema: str = ""
    # "" = the same model as call 1.
    model: str = ""
    instructions: str = ""
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] = 0.0
    # responseJsonSchema (JSON Schema) or responseSchema (the OpenAPI subset).
    wire_field: Literal["responseJsonSchema", "responseSchema"] = "responseJsonSchema"
    # true: records with a value found in no supported span of the answer are flagged.
    require_supported: bool = False
    # "two_call": ground, then structure. "single": ask for both in call 1 (models that claim
    # to accept schema + search); falls back to two calls on a 400 or an ungrounded reply.
    mode: Literal["two_call", "single"] = "two_call"


class RefreshSection(_Section):
    # Done questions whose latest answer is older than this are asked again by `ground run`
    # (e.g. "7d", "12h", "90m"); "" = never. The earlier answers are kept as history.
    max_age: str = ""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}  # seconds


def parse_duration(text: str) -> dt.timedelta:
    """``"7d"``, ``"12h"``, ``"90m"``, ``"30s"``, ``"2w"`` -> a positive timedelta.

    Raises ValueError saying what is accepted."""
    found = _DURATION.match(text)
    if found is None or float(found.group(1)) <= 0:
        raise ValueError(
            f"{text!r} is not a duration: a positive number and a unit, s m h d or w (e.g. 7d)"
        )
    return dt.timedelta(seconds=float(found.group(1)) * _DURATION_UNITS[found.group(2)])


class BatchSection(_Section):
    """``[model] mode = "batch"``: how questions go through the Gemini Batch API."""

    # Requests per batch and bytes per JSONL file (one file per batch; the file limit is 2 GB).
    max_requests: Positive = 50_000
    max_bytes: Annotated[int, msgspec.Meta(ge=1024, le=2_000_000_000)] = 1_000_000_000
    # Polling a batch: first wait, doubled up to the cap (seconds).
    poll_initial_s: PositiveFloat = 30.0
    poll_max_s: PositiveFloat = 600.0
    # false: `ground run` returns once the batch is submitted; a later run picks it up.
    wait: bool = True
    # Questions a batch gave back (failed rows, an expired or failed batch): "batch" = into
    # the next batch, "online" = asked online by the same run.
    retries: Literal["batch", "online"] = "batch"
    # true: call 2 (the structure step) goes as a second batch too; false: online.
    structure: bool = True
    # Seconds a question stays leased to a submitted batch (Google's target is 24 h).
    lease_s: Annotated[float, msgspec.Meta(ge=60)] = 72 * 3600.0


class ResolverSection(_Section):
    enabled: bool = True
    allow_hosts: tuple[str, ...] = DEFAULT_REDIRECT_HOSTS
    # Lookups in flight; 0 = automatic: requests_per_second / 4, within 16..256.
    concurrency: NonNegative = 0
    # Lookups per second; 0 = automatic: enough to keep up with the answers
    # (limits.requests_per_minute / 60 x RESOLVES_PER_ANSWER), at least 20.
    requests_per_second: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    timeout_s: PositiveFloat = 10.0


# Redirects to resolve per answer when sizing the resolver automatically: real answers carry
# up to ~5 web sources (several dozen are possible), so keep well ahead of the answer rate.
RESOLVES_PER_ANSWER = 8


def _sized(resolver: ResolverSection, requests_per_minute: int) -> ResolverSection:
    """The resolver's rate and concurrency, with the automatic (0) ones worked out."""
    rate = resolver.requests_per_second or max(20.0, requests_per_minute / 60 * RESOLVES_PER_ANSWER)
    concurrency = resolver.concurrency or int(min(256, max(16, rate / 4)))
    return msgspec.structs.replace(resolver, requests_per_second=rate, concurrency=concurrency)


class RawJob(_Section):
    job: JobSection
    source: SourceSection
    model: ModelSection = ModelSection()
    grounding: GroundingSection = GroundingSection()
    limits: LimitsSection = LimitsSection()
    resolver: ResolverSection = ResolverSection()
    structure: StructureSection = StructureSection()
    refresh: RefreshSection = RefreshSection()
    batch: BatchSection = BatchSection()


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

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def refresh_max_age(self) -> dt.timedelta | None:
        """``[refresh] max_age`` (checked at load); None: no refresh."""
        return parse_duration(self.refresh.max_age) if self.refresh.max_age else None


class JobSpecError(ValueError):
    """A job file that cannot be used; the message names the file and the key."""


def load_jobspec(path: str | Path, overrides: Iterable[str] = ()) -> JobSpec:
    """Read, override and validate a job file."""
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
    try:
        parsed = msgspec.convert(raw, RawJob)
    except msgspec.ValidationError as exc:
        raise JobSpecError(f"{path}: {_describe(exc)}") from None
    return _finish(path, parsed)


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


def _describe(exc: msgspec.ValidationError) -> str:
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
    return f"{key}: {reason}" if key else reason


def _finish(path: Path, parsed: RawJob) -> JobSpec:
    base = path.parent
    for state in parsed.job.fail_on:
        if state not in FAIL_ON_STATES:
            raise JobSpecError(
                f"{path}: job.fail_on: {state!r} is not a failure state"
                f" (any of {', '.join(FAIL_ON_STATES)})"
            )
    _check_source(path, parsed.source)
    source_path = (base / parsed.source.file).resolve()
    if parsed.source.file and source_path.is_dir():
        raise JobSpecError(f"{path}: source.file: {parsed.source.file!r} is a directory")
    if "{question}" not in parsed.model.prompt_template:
        raise JobSpecError(f"{path}: model.prompt_template: must contain {{question}}")
    _check_grounding(path, parsed)
    if parsed.model.mode == "batch" and parsed.model.backend != "developer":
        raise JobSpecError(
            f"{path}: model.mode: batch mode is Developer-API only for now (Vertex batch"
            " prediction reads its input from Cloud Storage or BigQuery); use"
            ' model.backend = "developer" or model.mode = "online"'
        )
    if parsed.model.base_url and not parsed.model.base_url.startswith(("http://", "https://")):
        raise JobSpecError(f"{path}: model.base_url: must start with http:// or https://")
    for host in parsed.resolver.allow_hosts:
        if not host or "/" in host:
            raise JobSpecError(f"{path}: resolver.allow_hosts: {host!r} is not a host name")
    schema = None
    if parsed.structure.enabled:
        if not parsed.structure.schema:
            raise JobSpecError(f"{path}: structure.schema: required when structure is enabled")
        try:
            schema = prepare_schema_file(
                base / parsed.structure.schema, wire_field=parsed.structure.wire_field
            )
        except SchemaError as exc:
            raise JobSpecError(f"{path}: structure.schema: {exc}") from None
    if parsed.refresh.max_age:
        try:
            parse_duration(parsed.refresh.max_age)
        except ValueError as exc:
            raise JobSpecError(f"{path}: refresh.max_age: {exc}") from None
    budget = parsed.limits.budget_usd
    return JobSpec(
        path=path,
        job=parsed.job,
        model=parsed.model,
        grounding=parsed.grounding,
        limits=parsed.limits,
        resolver=_sized(parsed.resolver, parsed.limits.requests_per_minute),
        structure=parsed.structure,
        database_url=_database_url(path, parsed.job.database, base),
        source=_with_source_url(parsed.source, base),
        source_path=source_path,
        schema=schema,
        budget=Decimal(str(budget)) if budget else None,
        refresh=parsed.refresh,
        batch=parsed.batch,
    )


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


def _check_source(path: Path, source: SourceSection) -> None:
    if bool(source.file) == bool(source.query):
        raise JobSpecError(f"{path}: source: give either file or query (with url), not both")
    if source.query and not source.url:
        raise JobSpecError(f"{path}: source.url: required with source.query")
    if source.url and not source.query:
        raise JobSpecError(f"{path}: source.url: only used with source.query")
    if source.query and "://" not in source.url:
        raise JobSpecError(f"{path}: source.url: {source.url!r} is not a database URL")


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
            file = rest[1:]
            if not file.strip():  # "sqlite:///" would be an in-memory database, lost at exit
                raise JobSpecError(f"{path}: job.database: write sqlite:///FILE (no file named)")
            if file and not file.startswith("/"):
                file = str((base / file).resolve())
            return f"sqlite+aiosqlite:///{file}"
        raise JobSpecError(f"{path}: job.database: write sqlite:///FILE")
    if dialect in ("postgresql", "postgres"):
        return f"postgresql+asyncpg://{rest}"
    raise JobSpecError(f"{path}: job.database: {dialect!r} is not supported (sqlite, postgresql)")
