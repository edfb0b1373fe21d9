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
* ``batch_copies``: what batch mode reads to copy answers instead of asking (reuse);
* ``batch_structure``: a structure batch's questions with their stored answers (call 2);
* ``batch_own``: own retrieval's batches: which questions they take, the requests they sent;
* ``statistics``: ``ANALYZE`` after a bulk write (load, index), so plans stay hash/index plans;
* ``status``: what ``status``, a run's progress and the report sum up (the read model);
* ``records``: results read back in batches, for export, show and the report;
* ``upsert``: ``INSERT ... ON CONFLICT DO NOTHING`` on both backends.
"""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.store import (
        batch_copies,
        batch_own,
        batch_structure,
        batches,
        citation_verdicts,
        desk,
        documents,
        ledger,
        model_drift,
        notify_deliveries,
        queue,
        quota,
        resolution,
        reviews,
        routes,
        statistics,
        status,
        urls,
        verdict_reads,
        versions,
    )
    from pipeline.store.answers import StoredAnswers, VerdictOf
    from pipeline.store.batch_structure import StructureQuestion
    from pipeline.store.batches import ERRORS_SEPARATOR
    from pipeline.store.database import (
        Database,
        DatabaseOutage,
        retrying,
        storage_trouble,
        trouble_of,
    )
    from pipeline.store.engine import (
        DatabaseSchemaError,
        create_engine,
        ensure_directory,
        head_revision,
        is_current,
        migrate,
        read_schema,
    )
    from pipeline.store.estimate_basis import read_estimate_basis
    from pipeline.store.exclusions import excluded_domain_sources
    from pipeline.store.faults import FileIdentity, storage_fault
    from pipeline.store.ledger import (
        LedgerTotals,
        job_call_stored,
        micro_to_usd,
        persist_calls,
        question_spend,
    )
    from pipeline.store.loads import Fingerprint, save_fingerprint, stored_fingerprint
    from pipeline.store.outcomes import store_outcomes, unstored
    from pipeline.store.query_vectors import store_query_vectors, stored_query_vector, text_hash
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
    from pipeline.store.report import ProblemRow, Scope, count_in_scope, ids_in_scope, problem_rows
    from pipeline.store.resolution import Lookup, SourceUpdate
    from pipeline.store.reuse import Reusable, reusable_answer, reusable_answers
    from pipeline.store.routes import StoredOwnAnswer, own_passages
    from pipeline.store.source_policy import PolicyPass, judge_sources, policy_counts
    from pipeline.store.statistics import INDEXED_TABLES, LOADED_TABLES, analyze
    from pipeline.store.status import (
        NO_CLASS,
        ClassRoutes,
        ClassStats,
        RouteStats,
        class_routes,
        class_stats,
        coverage_mean,
        latency_histogram,
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
    from pipeline.store.urls import async_url, database_problem, display_url, sqlite_file
    from pipeline.store.verdict_reads import VerdictRow, verdicts_by_answer
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "answers": (
                "StoredAnswers",
                "VerdictOf",
            ),
            "batch_structure": ("StructureQuestion",),
            "batches": ("ERRORS_SEPARATOR",),
            "database": (
                "Database",
                "DatabaseOutage",
                "retrying",
                "storage_trouble",
                "trouble_of",
            ),
            "engine": (
                "DatabaseSchemaError",
                "create_engine",
                "ensure_directory",
                "head_revision",
                "is_current",
                "migrate",
                "read_schema",
            ),
            "estimate_basis": ("read_estimate_basis",),
            "exclusions": ("excluded_domain_sources",),
            "faults": (
                "FileIdentity",
                "storage_fault",
            ),
            "ledger": (
                "LedgerTotals",
                "job_call_stored",
                "micro_to_usd",
                "persist_calls",
                "question_spend",
            ),
            "loads": (
                "Fingerprint",
                "save_fingerprint",
                "stored_fingerprint",
            ),
            "outcomes": (
                "store_outcomes",
                "unstored",
            ),
            "query_vectors": (
                "store_query_vectors",
                "stored_query_vector",
                "text_hash",
            ),
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
            "report": (
                "ProblemRow",
                "Scope",
                "count_in_scope",
                "ids_in_scope",
                "problem_rows",
            ),
            "resolution": (
                "Lookup",
                "SourceUpdate",
            ),
            "reuse": (
                "Reusable",
                "reusable_answer",
                "reusable_answers",
            ),
            "routes": (
                "StoredOwnAnswer",
                "own_passages",
            ),
            "statistics": ("INDEXED_TABLES", "LOADED_TABLES", "analyze"),
            "status": (
                "ClassRoutes",
                "ClassStats",
                "NO_CLASS",
                "RouteStats",
                "class_routes",
                "class_stats",
                "coverage_mean",
                "latency_histogram",
                "source_counts",
                "source_problems",
                "state_counts",
                "throttled_since",
            ),
            "source_policy": ("PolicyPass", "judge_sources", "policy_counts"),
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
            "urls": (
                "async_url",
                "database_problem",
                "display_url",
                "sqlite_file",
            ),
            "verdict_reads": (
                "VerdictRow",
                "verdicts_by_answer",
            ),
        },
        (
            "batch_copies",
            "batch_own",
            "batch_structure",
            "batches",
            "citation_verdicts",
            "desk",
            "documents",
            "ledger",
            "model_drift",
            "notify_deliveries",
            "queue",
            "quota",
            "resolution",
            "reviews",
            "routes",
            "statistics",
            "status",
            "urls",
            "verdict_reads",
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
    "async_url",
    "batch_copies",
    "batch_own",
    "batch_structure",
    "batches",
    "citation_verdicts",
    "class_routes",
    "class_stats",
    "count_in_scope",
    "coverage_mean",
    "create_engine",
    "database_problem",
    "desk",
    "display_url",
    "documents",
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
    "model_drift",
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
    "resolution",
    "retrying",
    "reusable_answer",
    "reusable_answers",
    "reviews",
    "routes",
    "sample_key",
    "save_fingerprint",
    "select_trial",
    "source_counts",
    "source_problems",
    "sqlite_file",
    "state_counts",
    "statistics",
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
    "urls",
    "verdict_reads",
    "verdicts_by_answer",
    "versions",
]
