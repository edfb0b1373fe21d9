"""Run DAGs with ``dag.test()`` in this process, and print what came of each task as JSON.

    python tests/support/airflow_dags/run_dags.py DAGS_FOLDER DAG_ID [DAG_ID ...]

The caller sets ``AIRFLOW_HOME`` (a directory of its own), ``GROUND_JOB`` and the job's
environment; the metadata database is a SQLite file there. For each task: its state, its
try number, its ``outcome`` XCom; and how many events :class:`GroundBatchTrigger` fired.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

POLL_S = 0.2


def configure(dags: Path) -> None:
    home = Path(os.environ["AIRFLOW_HOME"])
    os.environ.update(
        {
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        }
    )


def main(argv: list[str]) -> int:
    dags = Path(argv[0])
    configure(dags)
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.db import resetdb
    from airflow.utils.session import create_session

    from pipeline.orchestrate import airflow as adapter

    fired: list[dict] = []
    original = adapter.GroundBatchTrigger.run

    async def counted(self):  # every event the trigger fires, kept to report
        async for event in original(self):
            fired.append(event.payload)
            yield event

    adapter.GroundBatchTrigger.run = counted
    resetdb()
    bag = DagBag(dag_folder=str(dags))
    assert not bag.import_errors, bag.import_errors
    report: dict = {"fired": fired}
    for dag_id in argv[1:]:
        dag = bag.get_dag(dag_id)
        for task in dag.tasks:  # the triggers ask every POLL_S, not every 5 minutes
            if isinstance(task, adapter.GroundRunOperator):
                task.poll_interval_s = POLL_S
        run = dag.test()
        tasks = {}
        with create_session() as session:
            for ti in run.get_task_instances(session=session):
                query = XComModel.get_many(
                    run_id=run.run_id, key="outcome", dag_ids=dag_id, task_ids=ti.task_id
                )
                xcom = session.scalars(query).first()
                tasks[ti.task_id] = {
                    "state": str(ti.state),
                    "try_number": ti.try_number,
                    "outcome": None if xcom is None else XComModel.deserialize_value(xcom),
                }
        report[dag_id] = {"state": str(run.state), "tasks": tasks}
    print("REPORT " + json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
