"""What only an edit cures, checked before a command opens (and perhaps creates) its database.

A job whose question file is missing, whose CSV header or first JSONL record lacks the id or
text field, or whose backend's credentials are not in the environment would fail the same way
on every retry: it is refused here in one line naming the file, the column or the variable,
with exit status 2 (:mod:`pipeline.exit_codes`), and no database file is made. So is a model
that Google has shut down (:mod:`pipeline.job.model_rules`), for a command that calls it.
What a retry may cure (an outage, a refusal, a quota) is left to the run, which exits 1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pipeline.gemini.endpoint import credentials_file_problem
from pipeline.intake.files import fields_problem
from pipeline.job.model_rules import model_refusal
from pipeline.job.spec import JobSpec

__all__ = [
    "problem_before_database",
]

# The Developer API's key, under the names Google's SDK reads (pipeline.gemini.endpoint).
API_KEY_ENV = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


def problem_before_database(
    spec: JobSpec,
    *,
    questions: bool,
    calls: bool,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """The first mistake that only an edit of the job file, the question file or the
    environment cures, in one line; None when there is none. ``questions``: the command loads
    the job's question file; ``calls``: it calls the model."""
    if questions and (problem := question_file_problem(spec)) is not None:
        return problem
    if calls and (problem := model_refusal(spec)) is not None:
        return problem
    if calls:
        return credentials_problem(spec, os.environ if env is None else env)
    return None


def question_file_problem(spec: JobSpec) -> str | None:
    """A ``[source] file`` that is missing, or has no column for the job's id or text field
    (a ``[source] query`` is judged when it runs)."""
    source = spec.source
    if source.query:
        return None
    required = (source.id_field, source.text_field)
    problem = fields_problem(
        spec.source_path, source.format, required=required, what="question file"
    )
    if problem is None:
        return None
    for key in ("id_field", "text_field"):
        field = getattr(source, key)
        if problem.endswith((f"no column {field!r}", f"no field {field!r}")):
            return f"{problem} (source.{key} in the job file)"
    return problem


def credentials_problem(spec: JobSpec, env: Mapping[str, str]) -> str | None:
    """The credentials the job's backend and tools need that the environment does not give:
    the Developer API's key, Vertex AI's project, a Vertex credentials file that cannot be
    read, the variable ``[grounding] elasticsearch_api_key_env`` names."""
    if spec.model.backend == "developer":
        if not any(env.get(name) for name in API_KEY_ENV):
            return (
                "no API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) for the Developer API"
                ' (model.backend = "developer"; "vertex" for Vertex AI)'
            )
    elif not (spec.model.project or env.get("GOOGLE_CLOUD_PROJECT")):
        return "Vertex AI needs a project: set GOOGLE_CLOUD_PROJECT or model.project"
    elif (problem := credentials_file_problem(env)) is not None:
        return problem
    grounding = spec.grounding
    named = grounding.elasticsearch_api_key_env
    if "elasticsearch" in grounding.tools and named and not env.get(named):
        return f"grounding.elasticsearch_api_key_env: {named} is not set"
    return None
