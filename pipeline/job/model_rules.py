"""The job's models against the model table (:mod:`pipeline.costs.models`), and the
generation settings each call sends.

At load (:func:`model_warnings`): a preview, a model within :data:`SHUTDOWN_WARN_DAYS` of its
shutdown, an id the table does not know, and a sampling parameter set for a model that
deprecates it each add a warning. Before a command that calls the model opens its database
(:func:`model_refusal`, through :mod:`pipeline.cli.preflight`): a shut-down model is refused in
one line naming its shutdown date and its replacement (exit 2). A command that only reads the
database (status, export) still loads such a job.

:func:`generation_settings` is what goes into ``generationConfig`` besides the output limit:
the sampling parameters the job sets (none by default), and ``[model] thinking`` as the model
takes it: ``thinkingLevel`` on Gemini 3 and later, ``thinkingBudget`` on 2.5, never both.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from typing import Any, Protocol

from pipeline.clock import utcnow
from pipeline.costs.models import ModelRow, ModelTable, load_models
from pipeline.errors import MODEL_GONE_STOP
from pipeline.job.sections import DEFAULT_MODEL, ModelSection, StructureSection, VerifySection

__all__ = [
    "SHUTDOWN_WARN_DAYS",
    "THINKING_BUDGETS",
    "CallsModels",
    "called_models",
    "days_to_shutdown",
    "generation_settings",
    "model_gone_line",
    "model_refusal",
    "model_table",
    "model_warnings",
    "replacement_of",
    "shutdown_line",
    "thinking_config",
]

# The model a 404 names: "models/X is not found ...", "Publisher Model `.../models/X` ...".
_NAMED_MODEL = re.compile(r"\bmodels/([^\s`/]+) is|/models/([^\s`/]+)`")
SHUTDOWN_WARN_DAYS = 60  # a deprecated model this close to its shutdown warns at load
# [model] thinking on Gemini 2.5, as a thinkingBudget in tokens (ground's mapping: Google
# states the budget's range, 0 to 24576 on Flash, 128 to 32768 on Pro, not a level's budget).
THINKING_BUDGETS = {"minimal": 0, "low": 1024, "medium": 8192, "high": 24576}
PRO_MINIMAL_BUDGET = 128  # 2.5 Pro cannot switch thinking off


class CallsModels(Protocol):
    """A decoded job file or a loaded spec: the sections that name the models it calls."""

    @property
    def model(self) -> ModelSection: ...
    @property
    def structure(self) -> StructureSection: ...
    @property
    def verify(self) -> VerifySection: ...


@functools.cache
def model_table() -> ModelTable:
    """The bundled model table, read once per process."""
    return load_models()


def _today() -> dt.date:
    return utcnow().date()


def called_models(job: CallsModels) -> tuple[tuple[str, str], ...]:
    """The models the job calls, each with the key that names it: call 1, call 2 and the
    verification's model when those steps are on."""
    found = [("model.name", job.model.name)]
    if job.structure.enabled and job.structure.model:
        found.append(("structure.model", job.structure.model))
    if job.verify.enabled and job.verify.model:
        found.append(("verify.model", job.verify.model))
    return tuple(found)


def replacement_of(row: ModelRow | None, model: str = "") -> str:
    """The replacement to name: the table's, else the default (a current GA model) unless
    ``model`` is the default itself."""
    if row is not None and row.replacement:
        return f"its replacement is {row.replacement}"
    if model == DEFAULT_MODEL:
        return "no replacement is announced (`ground models` lists the current ones)"
    return f"no replacement is announced; {DEFAULT_MODEL} is current (`ground models`)"


def shutdown_line(model: str, row: ModelRow) -> str:
    """``gemini-2.5-flash was shut down on 2026-10-16; its replacement is gemini-3.5-flash``."""
    when = f" on {row.shutdown.isoformat()}" if row.shutdown is not None else ""
    return f"{model} was shut down{when}; {replacement_of(row)}"


def days_to_shutdown(model: str, backend: str, *, today: dt.date | None = None) -> int | None:
    """Days until ``model``'s announced shutdown (0 or less: past); None when the table
    announces none (or does not know the model)."""
    row = model_table().lookup(model, backend)
    return None if row is None else row.days_to_shutdown(today or _today())


def model_gone_line(section: ModelSection, stopped: str) -> str | None:
    """The one line for a run that the API's 404 for its model stopped: the model, what the
    API said, and the replacement the model table names; None for any other stop."""
    if not stopped.startswith(MODEL_GONE_STOP):
        return None
    model, backend = section.name, section.backend
    said = stopped.removeprefix(MODEL_GONE_STOP).lstrip(": ")
    named = _NAMED_MODEL.search(said)  # the model the 404 is for (call 2's may differ)
    model = named.group(1) or named.group(2) if named else model
    row = model_table().lookup(model, backend)
    return (
        f"run stopped: model {model} is not available ({said}); {replacement_of(row, model)};"
        " the questions not answered are left pending (edit the job's model, run again)"
    )


def model_refusal(
    job: CallsModels, *, table: ModelTable | None = None, today: dt.date | None = None
) -> str | None:
    """The first model the job calls that is shut down, in one line; None when none is."""
    table = table or model_table()
    day = today or _today()
    for key, model in called_models(job):
        row = table.lookup(model, job.model.backend)
        if row is not None and row.status_on(day) == "shut_down":
            return f"{key}: {shutdown_line(model, row)} (`ground models` lists the current ones)"
    return None


def model_warnings(
    job: CallsModels, *, table: ModelTable | None = None, today: dt.date | None = None
) -> tuple[str, ...]:
    """What deserves a look about the job's models: a preview, a shutdown near, an unknown
    id, a sampling parameter the model deprecates."""
    table = table or model_table()
    day = today or _today()
    warnings: list[str] = []
    for key, model in called_models(job):
        row = table.lookup(model, job.model.backend)
        warnings.extend(_row_warnings(key, model, row, day))
        if row is not None and row.sampling == "deprecated":
            warnings.extend(_sampling_warnings(job, key, model))
    return tuple(dict.fromkeys(warnings))


def _row_warnings(key: str, model: str, row: ModelRow | None, day: dt.date) -> list[str]:
    if row is None:
        return [
            f"{key}: {model} is not in the model table (pipeline/costs/models.toml): its"
            " status, shutdown and what it takes are unknown; `ground models` lists the known"
        ]
    status = row.status_on(day)
    days = row.days_to_shutdown(day)
    if status == "deprecated" and days is not None and 0 < days <= SHUTDOWN_WARN_DAYS:
        assert row.shutdown is not None
        return [
            f"{key}: {model} shuts down on {row.shutdown.isoformat()}, in {days} days;"
            f" {replacement_of(row)} (measure it first: `ground canary JOB --model NEW`)"
        ]
    if status == "preview":
        return [
            f"{key}: {model} is a preview: previews are switched off at short notice;"
            f" {DEFAULT_MODEL} is GA"
        ]
    return []


def _sampling_warnings(job: CallsModels, key: str, model: str) -> list[str]:
    return [
        f"{name}: deprecated for {model} (Google's Gemini 3 migration guide: leave sampling"
        " parameters out); it is still sent"
        for name in _sampling_keys(job, key)
    ]


def _sampling_keys(job: CallsModels, key: str) -> list[str]:
    """The sampling keys the job sets for the call ``key`` names."""
    structure = job.structure
    call_2 = structure.enabled and structure.temperature is not None
    if key == "model.name":
        keys = [
            f"model.{name}"
            for name in ("temperature", "top_p", "top_k")
            if getattr(job.model, name) is not None
        ]
        return [*keys, "structure.temperature"] if call_2 and not structure.model else keys
    if key == "structure.model":
        return ["structure.temperature"] if call_2 else []
    return []


def thinking_config(
    model: str, backend: str, level: str, *, table: ModelTable | None = None
) -> dict[str, Any] | None:
    """``[model] thinking`` as ``model`` takes it; None when it is not set, or the model's
    generation does not tell how (then nothing is sent)."""
    if not level:
        return None
    kind = (table or model_table()).thinking_of(model, backend)
    if kind == "level":
        return {"thinkingLevel": level}
    if kind == "budget":
        pro = "-pro" in model.lower()
        budget = PRO_MINIMAL_BUDGET if pro and level == "minimal" else THINKING_BUDGETS[level]
        return {"thinkingBudget": budget}
    return None


def generation_settings(
    model: str,
    backend: str,
    *,
    temperature: float | None,
    top_p: float | None = None,
    top_k: int | None = None,
    thinking: str = "",
    table: ModelTable | None = None,
) -> dict[str, Any]:
    """The ``generationConfig`` keys a call sends besides its output limit and schema: only
    what the job sets."""
    settings: dict[str, Any] = {}
    if temperature is not None:
        settings["temperature"] = temperature
    if top_p is not None:
        settings["topP"] = top_p
    if top_k is not None:
        settings["topK"] = top_k
    config = thinking_config(model, backend, thinking, table=table)
    if config is not None:
        settings["thinkingConfig"] = config
    return settings
