"""An Airflow 3 DAG that runs the nightly job at 02:00 UTC (``pip install 'ground[airflow]'``;
put this file in the DAGs folder, or import ``dag`` from it).

Two tasks, each one ``ground run`` of ``jobs/nightly.toml`` (``GROUND_JOB`` names another
job file), with the exit status mapped to Airflow's model by
:class:`~pipeline.orchestrate.airflow.GroundRunOperator`:

* ``ground_nightly``: online. Exit 1 (stopped early: budget, quota, an outage) is retried
  3 times, 10 minutes apart; exit 2 (needs an edit) fails at once; exit 3 (some questions
  failed) fails without a retry (``some_failed="warn"`` would let it succeed with a warning).
* ``ground_nightly_batch``: the same questions as a batch-mode job of its own name, deferred:
  it submits the batches and gives its worker slot back; the triggerer asks the Batch API
  every 5 minutes whether they have ended, and a worker then collects the results.

Each pushes the run's outcome to XCom under ``outcome`` (exit status, counts by state,
calls, spend, why it stopped). The worker needs the environment ``ground run`` needs
(``GEMINI_API_KEY``, ``PGPASSWORD`` ...); the triggerer too, for the deferred task (it asks
the Batch API with the job's credentials).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from pipeline.orchestrate.airflow import GroundRunOperator

JOB = os.environ.get("GROUND_JOB", str(Path(__file__).resolve().parent.parent / "nightly.toml"))
# The nightly job in batch mode, under a name of its own (its questions, answers and budget
# apart from the online job's): half the price, answers within 24 hours.
BATCH = {"model.mode": "batch", "job.name": "nightly_batch"}

with DAG(
    dag_id="ground_nightly",
    schedule="0 2 * * *",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,  # a run never overlaps the one before (nor would it pay twice)
    default_args={"retries": 3, "retry_delay": timedelta(minutes=10)},
    tags=["ground"],
) as dag:
    GroundRunOperator(task_id="ground_nightly", job=JOB, some_failed="fail")
    GroundRunOperator(
        task_id="ground_nightly_batch",
        job=JOB,
        overrides=BATCH,
        deferrable=True,
        poll_interval_s=300.0,
    )
