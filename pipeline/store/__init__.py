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

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.store import (
        answers,
        batch_items,
        batches,
        citation_verdicts,
        documents,
        engine,
        ledger,
        notify_deliveries,
        queue,
        quota,
        resolution,
        reviews,
        status,
        versions,
    )
    from pipeline.store.answers import (
        Reusable,
        StoredAnswers,
        StoredOwnAnswer,
        VerdictOf,
        own_passages,
        requeue_via_own,
        reusable_answer,
        reusable_answers,
        store_outcomes,
        unstored,
    )
    from pipeline.store.batch_items import StructureQuestion
    from pipeline.store.batches import ERRORS_SEPARATOR
    from pipeline.store.citation_verdicts import VerdictRow, verdicts_by_answer
    from pipeline.store.database import (
        Database,
        DatabaseOutage,
        FileIdentity,
        retrying,
        storage_fault,
        storage_trouble,
        trouble_of,
    )
    from pipeline.store.documents import store_query_vectors, stored_query_vector, text_hash
    from pipeline.store.engine import (
        INDEXED_TABLES,
        LOADED_TABLES,
        DatabaseSchemaError,
        analyze,
        async_url,
        create_engine,
        database_problem,
        display_url,
        ensure_directory,
        head_revision,
        is_current,
        migrate,
        read_schema,
        sqlite_file,
    )
    from pipeline.store.ledger import (
        LedgerTotals,
        job_call_stored,
        micro_to_usd,
        persist_calls,
        question_spend,
        read_estimate_basis,
    )
    from pipeline.store.queue import Fingerprint, save_fingerprint, stored_fingerprint
    from pipeline.store.records import (
        BATCH_QUESTIONS,
        Filters,
        Row,
        StoredQuestion,
        raw_response,
        read_batches,
        read_one,
        read_versions,
    )
    from pipeline.store.resolution import (
        Lookup,
        PolicyPass,
        SourceUpdate,
        excluded_domain_sources,
        judge_sources,
        policy_counts,
    )
    from pipeline.store.status import (
        NO_CLASS,
        ClassRoutes,
        ClassStats,
        ProblemRow,
        RouteStats,
        Scope,
        class_routes,
        class_stats,
        count_in_scope,
        coverage_mean,
        ids_in_scope,
        latency_histogram,
        problem_rows,
        source_counts,
        source_problems,
        state_counts,
        throttled_since,
    )
    from pipeline.store.tables import UtcDateTime
    from pipeline.store.trial import (
        MAX_SAMPLE,
        Trial,
        TrialScope,
        Waiting,
        first_unfinished,
        sample_key,
        select_trial,
    )
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "answers": (
                "Reusable",
                "StoredAnswers",
                "StoredOwnAnswer",
                "VerdictOf",
                "own_passages",
                "requeue_via_own",
                "reusable_answer",
                "reusable_answers",
                "store_outcomes",
                "unstored",
            ),
            "batch_items": ("StructureQuestion",),
            "batches": ("ERRORS_SEPARATOR",),
            "citation_verdicts": ("VerdictRow", "verdicts_by_answer"),
            "database": (
                "Database",
                "DatabaseOutage",
                "FileIdentity",
                "retrying",
                "storage_fault",
                "storage_trouble",
                "trouble_of",
            ),
            "documents": ("store_query_vectors", "stored_query_vector", "text_hash"),
            "engine": (
                "INDEXED_TABLES",
                "LOADED_TABLES",
                "DatabaseSchemaError",
                "analyze",
                "async_url",
                "create_engine",
                "database_problem",
                "display_url",
                "ensure_directory",
                "head_revision",
                "is_current",
                "migrate",
                "read_schema",
                "sqlite_file",
            ),
            "ledger": (
                "LedgerTotals",
                "job_call_stored",
                "micro_to_usd",
                "persist_calls",
                "question_spend",
                "read_estimate_basis",
            ),
            "queue": ("Fingerprint", "save_fingerprint", "stored_fingerprint"),
            "records": (
                "BATCH_QUESTIONS",
                "Filters",
                "Row",
                "StoredQuestion",
                "raw_response",
                "read_batches",
                "read_one",
                "read_versions",
            ),
            "resolution": (
                "Lookup",
                "PolicyPass",
                "SourceUpdate",
                "excluded_domain_sources",
                "judge_sources",
                "policy_counts",
            ),
            "status": (
                "NO_CLASS",
                "ClassRoutes",
                "ClassStats",
                "ProblemRow",
                "RouteStats",
                "Scope",
                "class_routes",
                "class_stats",
                "count_in_scope",
                "coverage_mean",
                "ids_in_scope",
                "latency_histogram",
                "problem_rows",
                "source_counts",
                "source_problems",
                "state_counts",
                "throttled_since",
            ),
            "tables": ("UtcDateTime",),
            "trial": (
                "MAX_SAMPLE",
                "Trial",
                "TrialScope",
                "Waiting",
                "first_unfinished",
                "sample_key",
                "select_trial",
            ),
        },
        (
            "answers",
            "batch_items",
            "batches",
            "citation_verdicts",
            "documents",
            "engine",
            "ledger",
            "notify_deliveries",
            "queue",
            "quota",
            "resolution",
            "reviews",
            "status",
            "versions",
        ),
    )

__all__ = [
    "BATCH_QUESTIONS",
    "ERRORS_SEPARATOR",
    "INDEXED_TABLES",
    "LOADED_TABLES",
    "MAX_SAMPLE",
    "NO_CLASS",
    "ClassRoutes",
    "ClassStats",
    "Database",
    "DatabaseOutage",
    "DatabaseSchemaError",
    "FileIdentity",
    "Filters",
    "Fingerprint",
    "LedgerTotals",
    "Lookup",
    "PolicyPass",
    "ProblemRow",
    "Reusable",
    "RouteStats",
    "Row",
    "Scope",
    "SourceUpdate",
    "StoredAnswers",
    "StoredOwnAnswer",
    "StoredQuestion",
    "StructureQuestion",
    "Trial",
    "TrialScope",
    "UtcDateTime",
    "VerdictOf",
    "VerdictRow",
    "Waiting",
    "analyze",
    "answers",
    "async_url",
    "batch_items",
    "batches",
    "citation_verdicts",
    "class_routes",
    "class_stats",
    "count_in_scope",
    "coverage_mean",
    "create_engine",
    "database_problem",
    "display_url",
    "documents",
    "engine",
    "ensure_directory",
    "excluded_domain_sources",
    "first_unfinished",
    "head_revision",
    "ids_in_scope",
    "is_current",
    "job_call_stored",
    "judge_sources",
    "latency_histogram",
    "ledger",
    "micro_to_usd",
    "migrate",
    "notify_deliveries",
    "own_passages",
    "persist_calls",
    "policy_counts",
    "problem_rows",
    "question_spend",
    "queue",
    "quota",
    "raw_response",
    "read_batches",
    "read_estimate_basis",
    "read_one",
    "read_schema",
    "read_versions",
    "requeue_via_own",
    "resolution",
    "retrying",
    "reusable_answer",
    "reusable_answers",
    "reviews",
    "sample_key",
    "save_fingerprint",
    "select_trial",
    "source_counts",
    "source_problems",
    "sqlite_file",
    "state_counts",
    "status",
    "storage_fault",
    "storage_trouble",
    "store_outcomes",
    "store_query_vectors",
    "stored_fingerprint",
    "stored_query_vector",
    "text_hash",
    "throttled_since",
    "trouble_of",
    "unstored",
    "verdicts_by_answer",
    "versions",
]
