"""Extras a user does not install add nothing: ``import pipeline``, its Python API and
``ground --help`` import no orchestrator (Airflow, Dagster), even where one is installed (the
dev environment has them: so the test can fail). Each adapter imports its orchestrator only
in its own module under :mod:`pipeline.orchestrate`. Checked in a fresh interpreter, whose
``sys.modules`` nothing else has filled."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO

ORCHESTRATORS = ("airflow", "dagster")

# Each snippet runs in a fresh interpreter; then the orchestrator modules it imported.
CASES = {
    "import pipeline": "import pipeline",
    "the Python API": (
        "import pipeline, pipeline.api, pipeline.orchestrate\n"
        "pipeline.run_job, pipeline.open_job, pipeline.load_questions, pipeline.RunOutcome\n"
        "pipeline.api.running_batches"
    ),
    "ground --help": (
        "from pipeline.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    ),
    "ground run --help": (
        "from pipeline.cli import main\ntry:\n    main(['run', '--help'])\nexcept SystemExit:\n"
        "    pass"
    ),
}
REPORT = (
    "\nimport json, sys\n"
    "print('IMPORTED', json.dumps(sorted(\n"
    f"    m for m in sys.modules if m.split('.')[0] in {ORCHESTRATORS!r})))"
)


def imported_orchestrators(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + REPORT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [line] = [x for x in done.stdout.splitlines() if x.startswith("IMPORTED ")]
    return json.loads(line.removeprefix("IMPORTED "))


@pytest.mark.parametrize("case", CASES)
def test_no_orchestrator_is_imported(case: str) -> None:
    assert imported_orchestrators(CASES[case]) == []


def test_the_check_sees_an_orchestrator_that_is_imported() -> None:
    pytest.importorskip("airflow.sdk", reason="needs ground[airflow]")
    found = imported_orchestrators("import pipeline.orchestrate.airflow")
    assert "airflow" in found and "airflow.sdk" in found
