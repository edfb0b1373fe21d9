"""All SQL: the schema, the engine, and one module per thing the pipeline stores or asks.

* ``engine``: engines (SQLite pragmas, the PostgreSQL pool) and :func:`migrate`;
* ``tables``: the SQLAlchemy Core tables (Alembic's migrations are the schema's source);
* ``queue``: claim under a lease, heartbeat, state changes, release, requeue; loading
  (``insert_new_questions``: ``INSERT ... ON CONFLICT DO NOTHING RETURNING``);
* ``loads``: the fingerprint of the question file a job last loaded (skip it unchanged);
* ``answers`` / ``results``: call 1's answers with sources and supports; call 2's objects;
* ``ledger``: every call with its cost, and the one spend query;
* ``resolution``: the sources still to resolve, and their verdicts;
* ``upsert``: ``INSERT ... ON CONFLICT DO NOTHING`` on both backends;
* ``batches``: batch mode's batches and the questions leased to each (claim, phases, link ages).
"""
