"""A test DAG over the job ``GROUND_JOB``: one task whose run stops at its budget (exit 1,
retried once), one whose question file is missing (exit 2, never retried)."""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import DAG

from pipeline.orchestrate.airflow import GroundRunOperator

JOB = os.environ["GROUND_JOB"]

with DAG(dag_id="ground_exits", schedule=None, catchup=False) as dag:
    GroundRunOperator(
        task_id="stopped",
        job=JOB,
        overrides={"job.name": "stopped", "limits.budget_usd": 0.000001},
        retries=1,
        retry_delay=timedelta(0),
    )
    GroundRunOperator(
        task_id="needs_edit",
        job=JOB,
        overrides=['job.name="needs_edit"', 'source.file="missing.jsonl"'],
        retries=3,
        retry_delay=timedelta(0),
    )
