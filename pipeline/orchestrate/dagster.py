"""``ground`` as Dagster assets (the ``dagster`` extra): a job file is an asset, materialized by
running the job; the run's :class:`~pipeline.run.outcome.RunOutcome` is the materialization's
metadata, and each state of the job's ``[job] fail_on`` is an asset check.

    import dagster as dg
    from pipeline.orchestrate.dagster import GroundResource, ground_asset

    answers = ground_asset("jobs/nightly.toml", retry_policy=dg.RetryPolicy(max_retries=3))
    defs = dg.Definitions(
        assets=[answers],
        resources={"ground": GroundResource(database=dg.EnvVar("GROUND_DATABASE_URL"))},
    )

The exit status (:mod:`pipeline.exit_codes`) becomes Dagster's model:

- 0: the asset is materialized and every check passes;
- 3: the asset is materialized; the checks of the ``fail_on`` states the job has questions in
  fail (severity ERROR; ``blocking_checks=True`` keeps downstream assets from running);
- 1 (stopped early: budget, quota, outage, a stop signal): a :class:`dagster.Failure` that
  the asset's ``retry_policy`` retries; the next attempt goes on where this one stopped;
- 2 (what only an edit cures: a job file, a missing key): a :class:`dagster.Failure` that
  skips the retry policy.

Only this module imports Dagster, and nothing imports this module but its user.
"""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations
# (its context and resource parameters) as objects.
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from pipeline.api.jobs import run_job
from pipeline.errors import GroundError
from pipeline.exit_codes import ExitStatus
from pipeline.job.spec import load_jobspec
from pipeline.results.api import as_override
from pipeline.run.outcome import RunOutcome

Overrides = Sequence[str] | Mapping[str, Any]
RESOURCE_KEY = "ground"  # the resource key a ground asset asks for

__all__ = ["RESOURCE_KEY", "GroundResource", "check_name", "ground_asset", "ground_assets"]


class GroundResource(dg.ConfigurableResource):
    """What differs between environments (a laptop, staging, production): the job's database
    and any other job-file setting. Given to :func:`ground_asset`'s assets as the resource
    ``"ground"``; applied after the asset's own ``overrides``, so an environment has the last
    word. Pass a database URL with a password as ``dg.EnvVar(...)``: Dagster then shows the
    variable's name, not its value."""

    # [job] database for this environment (sqlite:///FILE or postgresql://...); None: the
    # job file's.
    database: str | None = None
    # Further job-file settings, as `ground run --set` takes them: "section.key=value", the
    # value a TOML literal ("limits.budget_usd=20", 'model.name="gemini-3.8-flash"').
    overrides: list[str] = []  # noqa: RUF012 (a pydantic field: copied per instance)
    # A trial of the job's first N questions in this environment (`--limit N`); None: all.
    limit: int | None = None

    def settings(self, asset_overrides: Overrides = ()) -> list[str]:
        """The ``--set`` strings of a run: the asset's, then this environment's."""
        found = _as_set(asset_overrides) + list(self.overrides)
        if self.database is not None:
            found.append(f"job.database={_toml_string(self.database)}")
        return found

    def run(
        self, job: str | Path, asset_overrides: Overrides = (), *, limit: int | None = None
    ) -> RunOutcome:
        """Run the job of the job file ``job`` in this environment (:func:`pipeline.run_job`):
        the asset's ``limit`` unless this environment sets one."""
        limit = self.limit if self.limit is not None else limit
        return run_job(job, limit=limit, overrides=self.settings(asset_overrides))


def _toml_string(text: str) -> str:
    """``text`` as a TOML basic string (JSON's string escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def _as_set(overrides: Overrides) -> list[str]:
    if isinstance(overrides, Mapping):
        return [as_override(key, value) for key, value in overrides.items()]
    return list(overrides)


def check_name(state: str) -> str:
    """The asset check of the ``fail_on`` state ``state``: ``no_failed``, ``no_invalid``,
    ``no_sources_expired`` ..."""
    return f"no_{state}"


def _asset_name(job_name: str) -> str:
    """A Dagster asset name (letters, digits, ``_``) from a job's name."""
    name = re.sub(r"\W", "_", job_name, flags=re.ASCII).strip("_")
    return name or "ground_job"


def metadata_of(outcome: RunOutcome) -> dict[str, Any]:
    """The materialization's metadata: the outcome's figures, each a value Dagster plots
    over time, and the whole outcome as JSON (:meth:`RunOutcome.to_dict`)."""
    return {
        "exit_status": int(outcome.exit_status),
        "outcome": outcome.outcome,
        "stopped": dg.MetadataValue.text(outcome.stopped or ""),
        "dagster/row_count": outcome.total,
        "counts": dg.MetadataValue.json(dict(outcome.counts)),
        "calls": outcome.calls,
        "spend_usd": float(outcome.spend_usd),
        "job_spend_usd": float(outcome.job_spend_usd),
        "duration_s": round(outcome.duration_s, 3),
        "database": dg.MetadataValue.text(outcome.database),
        "run_outcome": dg.MetadataValue.json(outcome.to_dict()),
    }


def check_results(
    outcome: RunOutcome, fail_on: Iterable[str], *, asset_key: dg.AssetKey
) -> list[dg.AssetCheckResult]:
    """One result per ``fail_on`` state: passed when the outcome counts no question (or no
    lost link, for ``sources_*``) in it as a failure."""
    results = []
    for state in fail_on:
        failing = outcome.failures.get(state, 0)
        results.append(
            dg.AssetCheckResult(
                asset_key=asset_key,
                check_name=check_name(state),
                passed=failing == 0,
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={"count": failing, "state": state},
            )
        )
    return results


def check_specs(
    fail_on: Iterable[str], key: dg.AssetKey, *, blocking: bool
) -> list[dg.AssetCheckSpec]:
    """The asset checks of the ``fail_on`` states, declared with the asset."""
    return [
        dg.AssetCheckSpec(
            check_name(state),
            asset=key,
            blocking=blocking,
            description=f"No question of the job in the fail_on state {state!r}.",
        )
        for state in fail_on
    ]


def _failure(outcome: RunOutcome) -> dg.Failure:
    """Exit 1 (retryable) or 2 (not) as a step failure carrying the outcome."""
    retry = outcome.exit_status == ExitStatus.FAILED
    why = outcome.stopped or f"exit status {int(outcome.exit_status)}"
    return dg.Failure(
        description=f"ground run of {outcome.job}: {why}",
        metadata=metadata_of(outcome),
        allow_retries=retry,
    )


def _refused(job: str | Path, exc: GroundError) -> dg.Failure:
    """An error raised before the run started, as a failure: retryable only when the error's
    exit status is 1 (a database that cannot be reached yet), never for exit 2."""
    status = getattr(exc, "exit_status", ExitStatus.USAGE)
    return dg.Failure(
        description=f"ground run of {job}: {exc}",
        metadata={"exit_status": int(status)},
        allow_retries=status == ExitStatus.FAILED,
    )


def ground_asset(
    job: str | Path,
    *,
    name: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    deps: Iterable[Any] | None = None,
    overrides: Overrides = (),
    limit: int | None = None,
    fail_on: Sequence[str] | None = None,
    blocking_checks: bool = False,
    retry_policy: dg.RetryPolicy | None = None,
) -> dg.AssetsDefinition:
    """The job of the job file ``job`` as an asset: materializing it runs the job to its end
    with :func:`pipeline.run_job` and records the :class:`RunOutcome` as metadata.

    ``name``: the asset's (default: the job's name, made a Dagster name); ``overrides``: job
    settings as ``--set`` takes them (a list of ``"section.key=value"`` or a mapping);
    ``limit``: a trial of the first N questions. The asset checks are the job file's
    ``[job] fail_on`` states (read now, with ``overrides``), or ``fail_on`` when given;
    ``blocking_checks`` makes a failed check stop downstream assets. ``retry_policy`` applies
    to exit status 1 (and a database not reachable yet), never to 2. The asset needs the
    resource ``"ground"`` (:class:`GroundResource`; ``GroundResource()`` changes nothing)."""
    spec = load_jobspec(job, _as_set(overrides))
    states = tuple(spec.job.fail_on if fail_on is None else fail_on)
    key = dg.AssetKey([*_prefix(key_prefix), name or _asset_name(spec.name)])
    checks = check_specs(states, key, blocking=blocking_checks)

    @dg.asset(
        key=key,
        group_name=group_name,
        description=description or f"The answers of the ground job {spec.name!r} ({job}).",
        deps=deps,
        check_specs=checks,
        retry_policy=retry_policy,
        kinds={"ground"},
    )
    def _materialize(
        context: dg.AssetExecutionContext, ground: GroundResource
    ) -> dg.MaterializeResult:
        try:
            outcome = ground.run(job, overrides, limit=limit)
        except GroundError as exc:
            raise _refused(job, exc) from None
        context.log.info(f"ground run of {outcome.job}: {outcome.outcome}")
        if outcome.exit_status not in (ExitStatus.OK, ExitStatus.SOME_FAILED):
            raise _failure(outcome)
        return dg.MaterializeResult(
            metadata=metadata_of(outcome),
            check_results=check_results(outcome, states, asset_key=key),
        )

    return _materialize


def ground_assets(
    jobs: Iterable[str | Path] | Mapping[str, str | Path], **options: Any
) -> list[dg.AssetsDefinition]:
    """:func:`ground_asset` for each job file of ``jobs`` (a mapping: asset name to job file),
    each with the same ``options`` (``group_name``, ``retry_policy`` ...)."""
    if isinstance(jobs, Mapping):
        return [ground_asset(Path(path), name=str(name), **options) for name, path in jobs.items()]
    return [ground_asset(path, **options) for path in jobs]


def _prefix(key_prefix: str | Sequence[str] | None) -> list[str]:
    if key_prefix is None:
        return []
    return [key_prefix] if isinstance(key_prefix, str) else list(key_prefix)
