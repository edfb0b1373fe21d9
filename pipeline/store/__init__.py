"""All SQL: the schema, the engine, and one module per thing the pipeline stores or asks.

* ``engine``: engines (SQLite pragmas, the PostgreSQL pool) and :func:`migrate` (locked);
* ``database``: retrying a transaction across a database restart, up to an outage limit;
* ``tables``: the SQLAlchemy Core tables (Alembic's migrations are the schema's source);
* ``queue``: claim under a lease, heartbeat, state changes, release, requeue; loading
  (``insert_new_questions``: ``INSERT ... ON CONFLICT DO NOTHING RETURNING``);
* ``loads``: the fingerprint of the question file a job last loaded (skip it unchanged);
* ``outcomes``: a group of outcomes (answers, objects, ledger rows, states) in one place;
* ``answers`` / ``structured`` / ``versions``: call 1's answers with sources and supports, call
  2's objects, and their versions (nothing paid for is deleted);
* ``ledger``: every call with its cost, and the one spend query;
* ``quota``: the job's rate, tokens, daily count and budget, shared by its processes;
* ``resolution``: the sources still to resolve, and their verdicts;
* ``batches``: batch mode's batches and the questions leased to each (claim, phases, link ages);
* ``batch_structure``: a structure batch's questions with their stored answers (call 2);
* ``status``: what ``status``, a run's progress and the report sum up (the read model);
* ``records``: results read back in batches, for export, show and the report;
* ``upsert``: ``INSERT ... ON CONFLICT DO NOTHING`` on both backends.
"""
