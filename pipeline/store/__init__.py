"""All SQL: the schema, the engine, and one module per thing the pipeline stores or asks.

* ``engine``: engines (SQLite pragmas, the PostgreSQL pool) and :func:`migrate` (locked);
* ``reconnect``: retrying a transaction across a database restart, up to an outage limit;
* ``tables``: the SQLAlchemy Core tables (Alembic's migrations are the schema's source);
* ``queue``: claim under a lease, heartbeat, state changes, release, requeue; loading
  (``insert_new_questions``: ``INSERT ... ON CONFLICT DO NOTHING RETURNING``);
* ``loads``: the fingerprint of the question file a job last loaded (skip it unchanged);
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

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:
    from pipeline.store import (
        answer_models,
        batch_structure,
        batches,
        documents,
        ledger,
        queue,
        quota,
        resolution,
        routes,
        status,
        urls,
        versions,
    )
    from pipeline.store.answers import AnswerRecord, StoredAnswers, VerdictOf, persist_answers
    from pipeline.store.batch_structure import StructureQuestion
    from pipeline.store.batches import ERRORS_SEPARATOR
    from pipeline.store.engine import (
        SchemaError,
        create_engine,
        ensure_directory,
        head_revision,
        is_current,
        migrate,
        read_schema,
    )
    from pipeline.store.exclusions import excluded_domain_sources
    from pipeline.store.faults import FileIdentity, storage_fault
    from pipeline.store.ledger import (
        CallRecord,
        job_call_stored,
        micro_to_usd,
        persist_calls,
        stored_call_keys,
    )
    from pipeline.store.loads import Fingerprint, save_fingerprint, stored_fingerprint
    from pipeline.store.query_vectors import store_query_vectors, stored_query_vector, text_hash
    from pipeline.store.queue import ClaimedQuestion, StateChange
    from pipeline.store.reconnect import (
        Database,
        DatabaseOutage,
        retrying,
        storage_trouble,
        trouble_of,
    )
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
    from pipeline.store.resolution import Lookup, SourceUpdate
    from pipeline.store.reuse import Reusable, reusable_answer
    from pipeline.store.routes import ROUTE_MANAGED, ROUTE_OWN, own_passages
    from pipeline.store.status import (
        NO_CLASS,
        ClassRoutes,
        ClassStats,
        RouteStats,
        class_routes,
        class_stats,
        coverage_mean,
        latency_histogram,
        source_problems,
        state_counts,
    )
    from pipeline.store.structured import StructuredRecord, persist_structured
    from pipeline.store.tables import UtcDateTime, questions
    from pipeline.store.trial import MAX_SAMPLE, Trial, TrialScope, first_unfinished, select_trial
    from pipeline.store.urls import async_url, database_problem, display_url, sqlite_file
else:
    __getattr__ = lazy_surface(
        __name__,
        {
            "answers": ("AnswerRecord", "StoredAnswers", "VerdictOf", "persist_answers"),
            "batch_structure": ("StructureQuestion",),
            "batches": ("ERRORS_SEPARATOR",),
            "engine": (
                "SchemaError",
                "create_engine",
                "ensure_directory",
                "head_revision",
                "is_current",
                "migrate",
                "read_schema",
            ),
            "exclusions": ("excluded_domain_sources",),
            "faults": ("FileIdentity", "storage_fault"),
            "ledger": (
                "CallRecord",
                "job_call_stored",
                "micro_to_usd",
                "persist_calls",
                "stored_call_keys",
            ),
            "loads": ("Fingerprint", "save_fingerprint", "stored_fingerprint"),
            "query_vectors": ("store_query_vectors", "stored_query_vector", "text_hash"),
            "queue": ("ClaimedQuestion", "StateChange"),
            "reconnect": (
                "Database",
                "DatabaseOutage",
                "retrying",
                "storage_trouble",
                "trouble_of",
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
            "resolution": ("Lookup", "SourceUpdate"),
            "reuse": ("Reusable", "reusable_answer"),
            "routes": ("ROUTE_MANAGED", "ROUTE_OWN", "own_passages"),
            "status": (
                "NO_CLASS",
                "ClassRoutes",
                "ClassStats",
                "RouteStats",
                "class_routes",
                "class_stats",
                "coverage_mean",
                "latency_histogram",
                "source_problems",
                "state_counts",
            ),
            "structured": ("StructuredRecord", "persist_structured"),
            "tables": ("UtcDateTime", "questions"),
            "trial": ("MAX_SAMPLE", "Trial", "TrialScope", "first_unfinished", "select_trial"),
            "urls": ("async_url", "database_problem", "display_url", "sqlite_file"),
        },
        (
            "answer_models",
            "batch_structure",
            "batches",
            "documents",
            "ledger",
            "queue",
            "quota",
            "resolution",
            "routes",
            "status",
            "urls",
            "versions",
        ),
    )

__all__ = [
    "BATCH_QUESTIONS",
    "ERRORS_SEPARATOR",
    "MAX_SAMPLE",
    "NO_CLASS",
    "ROUTE_MANAGED",
    "ROUTE_OWN",
    "AnswerRecord",
    "CallRecord",
    "ClaimedQuestion",
    "ClassRoutes",
    "ClassStats",
    "Database",
    "DatabaseOutage",
    "FileIdentity",
    "Filters",
    "Fingerprint",
    "Lookup",
    "Reusable",
    "RouteStats",
    "Row",
    "SchemaError",
    "SourceUpdate",
    "StateChange",
    "StoredAnswers",
    "StoredQuestion",
    "StructureQuestion",
    "StructuredRecord",
    "Trial",
    "TrialScope",
    "UtcDateTime",
    "VerdictOf",
    "answer_models",
    "async_url",
    "batch_structure",
    "batches",
    "class_routes",
    "class_stats",
    "coverage_mean",
    "create_engine",
    "database_problem",
    "display_url",
    "documents",
    "ensure_directory",
    "excluded_domain_sources",
    "first_unfinished",
    "head_revision",
    "is_current",
    "job_call_stored",
    "latency_histogram",
    "ledger",
    "micro_to_usd",
    "migrate",
    "own_passages",
    "persist_answers",
    "persist_calls",
    "persist_structured",
    "questions",
    "queue",
    "quota",
    "raw_response",
    "read_batches",
    "read_one",
    "read_schema",
    "read_versions",
    "resolution",
    "retrying",
    "reusable_answer",
    "routes",
    "save_fingerprint",
    "select_trial",
    "source_problems",
    "sqlite_file",
    "state_counts",
    "status",
    "storage_fault",
    "storage_trouble",
    "store_query_vectors",
    "stored_call_keys",
    "stored_fingerprint",
    "stored_query_vector",
    "text_hash",
    "trouble_of",
    "urls",
    "versions",
]
