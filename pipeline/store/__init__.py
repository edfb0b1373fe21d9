"""All SQL, one module per family of tables: each module owns the queries of its tables.

A new feature adds a function (or a few) to the family whose tables it reads or writes, not a
module of its own; a family outgrowing one module (600 lines) is split by table, not by
caller. Transactions are not opened here but by whoever runs the work (the run, a command),
through :class:`~pipeline.store.database.Database`: every function here takes the caller's
connection, so one transaction can span several families (a group commit).

* ``engine``: engines (SQLite pragmas, the PostgreSQL pool), :func:`migrate` (locked), the
  database URLs (shown without a password), ``ANALYZE`` after a bulk write, and
  ``INSERT ... ON CONFLICT DO NOTHING`` on both backends;
* ``database``: :class:`Database`, the one way a run reaches its database (a transaction
  retried across a database restart, up to an outage limit), and the storage faults (a full
  disk, a read-only or removed file) told apart from an outage;
* ``tables``: the SQLAlchemy Core tables (Alembic's migrations are the schema's source);
* ``queue``: ``jobs`` and ``questions`` as a work queue: claim under a lease, heartbeat,
  state changes, release, requeue, loading, and the fingerprint of the file last loaded
  (``source_loads``);
* ``answers``: call 1's answers with sources and supports, call 2's objects (``structured``),
  a group of outcomes stored at once, reused answers, and own retrieval's routes;
* ``versions``: answer and structured-object versions (the latest, superseding, asking again);
* ``ledger``: ``calls``: every call with its cost, the spend, which answer version each call
  paid for, which model made what, and what ``ground estimate`` reads;
* ``quota``: ``shared_limits`` and ``budget_holds``: the job's rate, tokens, daily count and
  budget, shared by its processes;
* ``resolution``: ``sources``: what is left to resolve and the verdicts, the excluded
  domains, and the ``[sources]`` policy applied to them;
* ``batches``: batch mode's ``batches`` and the questions leased to each (claim, phases, link
  ages);
* ``batch_items``: what a batch's questions carry by step: own retrieval's requests, a
  structure batch's stored answers, the texts copied instead of asked;
* ``citation_verdicts``: what ``ground verify`` reads and stores, and the verdicts read back;
* ``status``: what ``status``, a run's progress and the report sum up (the read model), and
  the report's scope and problem rows;
* ``reviews``: people's decisions (an audit trail) and the review desk's pages;
* ``documents``: own retrieval's index (``documents``, ``chunks``), its searches, and the
  questions' stored embeddings (``query_vectors``);
* ``records``: results read back in batches, for export, show and the report;
* ``trial``: the questions a ``ground run --limit`` or ``--sample`` may touch;
* ``notify_deliveries``: the webhook outbox's deliveries.
"""
