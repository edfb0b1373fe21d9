"""The job file (TOML) -> a frozen, validated :class:`JobSpec`.

The file is decoded into the sections of :mod:`pipeline.job.sections` (types, defaults and
per-key limits); the rules that span keys or sections are checked by the modules named for
what they check (:mod:`~pipeline.job.tool_rules`, :mod:`~pipeline.job.call_rules`,
:mod:`~pipeline.job.source_rules`, :mod:`~pipeline.job.capacity`,
:mod:`~pipeline.job.durations`, :mod:`~pipeline.job.grounded_request` for the token limit),
and paths are made absolute (:mod:`~pipeline.job.paths`); this module puts them in order.

Every error names the file and the key (``jobs/demo.toml: limits.concurrency: Expected `int`
>= 1, got 0``) and is raised as :class:`JobSpecError`; the CLI turns it into exit status 2.
Unknown keys are errors, never silently ignored: a typo in a nightly job must not quietly fall
back to a default (the error names the closest key: ``did you mean `file`?``). A known key of
a switched-off feature (``fallback_when`` with ``fallback = ""``) is no error: it is ignored,
with one note on stderr (:mod:`pipeline.job.switched_off`).

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
import tomllib
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

from pipeline.costs.labels import LabelError, check_labels
from pipeline.errors import GroundError
from pipeline.gemini.endpoint import backend_from_env
from pipeline.job.call_rules import check_allow_hosts, check_calls, check_gcs
from pipeline.job.capacity import check_concurrency, sized
from pipeline.job.decode_errors import describe
from pipeline.job.durations import check_durations, parse_duration
from pipeline.job.grounded_request import check_token_limit
from pipeline.job.model_rules import model_warnings
from pipeline.job.notify_rules import check_notify
from pipeline.job.paths import (
    checked_prices,
    database_url,
    resolved_retrieval,
    source_path,
    with_source_url,
)
from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import (
    FAIL_ON_SOURCES,
    FAIL_ON_STATES,
    BatchSection,
    CanarySection,
    GroundingSection,
    JobSection,
    LimitsSection,
    ModelSection,
    NotifySection,
    RawJob,
    RefreshSection,
    ResolverSection,
    RetrievalSection,
    SourceSection,
    SourcesSection,
    StructureSection,
    VerifySection,
)
from pipeline.job.source_policy import check_sources, with_denied_excluded
from pipeline.job.source_rules import check_retrieval, check_source
from pipeline.job.switched_off import ignore_switched_off
from pipeline.job.tool_rules import check_grounding, search_warnings
from pipeline.structure.schema import PreparedSchema, SchemaError, prepare_schema_file

__all__ = [
    "JobSpec",
    "JobSpecError",
    "load_jobspec",
    "parse_duration",
]

log = logging.getLogger(__name__)


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
    # What loaded but deserves a look (a data store outside locations/global, a key of a
    # switched-off feature, ignored), logged at load.
    warnings: tuple[str, ...] = ()
    # [retrieval], its docs path made absolute and its sqlite url relative to the job file
    retrieval: RetrievalSection = RetrievalSection()
    verify: VerifySection = VerifySection()  # [verify] (pipeline.verify)
    # [sources]: rules on the cited destinations (pipeline.grounding.policy); its deny list is
    # already in grounding.exclude_domains on Vertex (pipeline.job.source_policy)
    sources: SourcesSection = SourcesSection()
    notify: NotifySection = NotifySection()  # [notify] (pipeline.notify)
    canary: CanarySection = CanarySection()  # [canary] (ground canary)

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
        raise JobSpecError(f"{path}: {describe(exc, raw)}") from None
    try:
        spec = _finish(path, parsed)
    except KeyRefused as exc:
        raise JobSpecError(f"{path}: {exc}") from None
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


def _finish(path: Path, parsed: RawJob) -> JobSpec:
    """The cross-key rules, in the order their errors are reported (each raises
    :class:`KeyRefused`); then the spec, with its paths resolved against the job file's
    directory."""
    base = path.parent
    parsed, ignored = ignore_switched_off(parsed)
    _check_fail_on(parsed.job)
    _check_labels(parsed.job)
    check_source(parsed.source)
    questions = source_path(parsed.source, base)
    check_calls(parsed)
    check_grounding(parsed)
    check_sources(parsed.sources)
    parsed = msgspec.structs.replace(parsed, grounding=with_denied_excluded(parsed))
    check_gcs(parsed.batch)
    resolver = sized(parsed.resolver, parsed.limits.requests_per_minute)
    check_concurrency(parsed.limits, resolver)
    check_allow_hosts(parsed.resolver)
    schema = _prepared_schema(parsed.structure, base)
    check_durations(parsed.job, parsed.refresh)
    check_retrieval(parsed)
    check_notify(parsed.notify)
    limits = checked_prices(parsed.limits, base)
    database = database_url(parsed.job.database, base)
    check_token_limit(parsed.model, parsed.grounding, limits)
    budget = limits.budget_usd
    return JobSpec(
        path=path,
        job=parsed.job,
        model=parsed.model,
        grounding=parsed.grounding,
        limits=limits,
        resolver=resolver,
        structure=parsed.structure,
        database_url=database,
        source=with_source_url(parsed.source, base),
        source_path=questions,
        schema=schema,
        budget=Decimal(str(budget)) if budget else None,
        refresh=parsed.refresh,
        batch=parsed.batch,
        warnings=(*ignored, *search_warnings(parsed.grounding), *model_warnings(parsed)),
        retrieval=resolved_retrieval(parsed.retrieval, base),
        verify=parsed.verify,
        sources=parsed.sources,
        notify=parsed.notify,
        canary=parsed.canary,
    )


def _check_fail_on(job: JobSection) -> None:
    for state in job.fail_on:
        if state not in FAIL_ON_STATES and state not in FAIL_ON_SOURCES:
            raise KeyRefused(
                "job.fail_on",
                f"{state!r} is not a failure state"
                f" (any of {', '.join((*FAIL_ON_STATES, *FAIL_ON_SOURCES))})",
            )


def _check_labels(job: JobSection) -> None:
    try:
        check_labels(job.labels)
    except LabelError as exc:
        raise KeyRefused("job.labels", str(exc)) from None


def _prepared_schema(structure: StructureSection, base: Path) -> PreparedSchema | None:
    """Call 2's schema file, prepared and checked; None when the structure step is off."""
    if not structure.enabled:
        return None
    if not structure.schema:
        raise KeyRefused("structure.schema", "required when structure is enabled")
    try:
        return prepare_schema_file(base / structure.schema, wire_field=structure.wire_field)
    except SchemaError as exc:
        raise KeyRefused("structure.schema", str(exc)) from None
