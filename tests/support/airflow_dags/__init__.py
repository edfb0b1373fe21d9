"""Airflow's side of the tests: a DAG file and a child process that runs DAGs with
``dag.test()`` (Airflow's state is global: a metadata database, a DAGs folder, settings read
from the environment once)."""
