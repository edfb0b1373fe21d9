"""The schema, as SQLAlchemy Core tables.

Alembic migrations in ``migrations/`` are the only source of change to a live database; this
module must describe the same schema as the newest migration (a test compares them).

Timestamps are UTC, timezone-aware ``datetime`` values. Lists (queries, chunk indices, scores)
are JSON columns: they are read whole and never queried inside.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = [
    "UtcDateTime",
]

# Deterministic constraint names, so migrations can refer to them on every backend.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UtcDateTime(TypeDecorator[dt.datetime]):
    """An aware UTC datetime on every backend (SQLite hands back naive values otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: the store only takes aware UTC datetimes")
        return value.astimezone(dt.UTC)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None or value.tzinfo is not None:
            return value
        return value.replace(tzinfo=dt.UTC)


# The states a claim may take a question from ("running" for an expired lease). The claim's
# partial index holds only these rows, so a claim costs the same at 1 % and at 99 % done; the
# predicate is spelled the same way in the index and in the queries (SQLite only uses a partial
# index when the query's WHERE contains the index's terms as written).
CLAIMABLE_STATES = ("pending", "retry_wait", "awaiting_structure", "running")
CLAIMABLE_SQL = f"state IN ({', '.join(repr(state) for state in CLAIMABLE_STATES)})"

# BigInteger primary keys autoincrement on PostgreSQL; SQLite only does so for INTEGER.
Id = BigInteger().with_variant(Integer(), "sqlite")

jobs = Table(
    "jobs",
    metadata,
    Column("id", Id, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("created_at", UtcDateTime(), nullable=False),
)

questions = Table(
    "questions",
    metadata,
    Column("id", Id, primary_key=True),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("qid", String(512), nullable=False),  # the input's own id: the key, never the text
    Column("text", Text, nullable=False),
    Column("qclass", String(200)),
    Column("meta", JSON),
    Column("state", String(20), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),  # grounded calls made (call 1)
    Column("structure_attempts", Integer, nullable=False, default=0),  # call 2 attempts
    Column("lease_owner", String(100)),
    Column("lease_expires_at", UtcDateTime()),
    Column("next_attempt_at", UtcDateTime()),
    Column("error_class", String(50)),
    Column("last_error", Text),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    # 0006_answer_versions: call 1 is to be made again although an answer is stored (retry of
    # an ungrounded answer, refresh); the stored answer stays the latest until a new one is.
    Column("reask", Boolean, nullable=False, server_default=false()),
    # 0013_answer_route: "own" = the next call 1 goes through own retrieval whatever the class
    # (a managed answer that missed was handed over; retry --via own_retrieval); null: the
    # job's routing. Cleared when an own answer is stored (pipeline.store.answers).
    Column("next_route", String(10)),
    # 0018_source_policy: the domains a queued re-ask names ([sources] action = "reask")
    Column("avoid_domains", JSON),
    UniqueConstraint("job_id", "qid"),
    Index("ix_questions_claim", "job_id", "state", "next_attempt_at"),
    Index(
        "ix_questions_claimable",
        "job_id",
        "id",
        sqlite_where=text(CLAIMABLE_SQL),
        postgresql_where=text(CLAIMABLE_SQL),
    ),
)

answers = Table(
    "answers",
    metadata,
    Column("id", Id, primary_key=True),
    Column("question_id", Id, ForeignKey("questions.id", ondelete="CASCADE"), nullable=False),
    # Answers are versioned and never deleted (0006_answer_versions): 1, 2, ... per question.
    # The unique (question_id, version) key is what makes a second paid call 1 for the same
    # version impossible to persist twice. The latest version has superseded_at null; every
    # reader reads that one unless asked for all.
    Column("version", Integer, nullable=False, server_default="1"),
    Column("superseded_at", UtcDateTime()),
    # Against the version before (null for version 1): text, sources or destinations moved.
    Column("changed", Boolean),
    Column("changes", JSON),  # which of "text", "sources", "destinations"; null for version 1
    Column("text", Text, nullable=False),
    Column("grounded", Boolean, nullable=False),
    Column("finish_reason", String(50)),
    Column("model_version", String(100)),
    Column("response_id", String(200)),
    Column("web_search_queries", JSON, nullable=False),
    Column("retrieval_queries", JSON, nullable=False),
    Column("search_entry_point_html", Text),  # verbatim: it must be shown unmodified
    Column("prompt_tokens", Integer, nullable=False),
    Column("candidates_tokens", Integer, nullable=False),
    Column("tool_use_prompt_tokens", Integer, nullable=False),
    Column("thoughts_tokens", Integer, nullable=False),
    Column("total_tokens", Integer, nullable=False),
    Column("coverage", Float, nullable=False),
    Column("warnings", JSON, nullable=False),
    Column("latency_ms", Float, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("raw_response", Text, nullable=False),  # the body as received, for audit
    # 0004_chunk_fields
    Column("maps_widget_token", Text),  # googleMapsWidgetContextToken: renders the Maps widget
    Column("dynamic_retrieval_score", Float),  # legacy 1.5 googleSearchDynamicRetrievalScore
    Column("url_context_statuses", JSON),  # [{url, status}] from urlContextMetadata; null: none
    # toolCall/toolResponse/executableCode/codeExecutionResult/function parts (in raw_response)
    Column("tool_parts", Integer, nullable=False, server_default="0"),
    # 0013_answer_route: "managed" (the grounded call) or "own" (own retrieval's passages)
    Column("route", String(10), nullable=False, server_default="managed"),
    # 0014_answer_reuse: the text asked, when the question's text changed since (on_change =
    # "reask"; null: its current text); the settings fingerprint (model, tools, prompt); the
    # fingerprint with the text asked (reuse_answers_within looks answers up by it); the
    # answer this one was copied from at no cost (null: asked).
    Column("asked_text", Text),
    Column("settings", String(32)),
    Column("reuse_key", String(64)),
    Column("reused_from", BigInteger),
    # 0017_image_search_queries: groundingMetadata.imageSearchQueries (null: stored before)
    Column("image_search_queries", JSON),
    # 0018_source_policy: coverage as answered, kept when dropped sources lowered `coverage`;
    # the domains this answer's prompt named (a re-ask's answer)
    Column("coverage_answered", Float),
    Column("avoided_domains", JSON),
    UniqueConstraint("question_id", "version", name="uq_answers_question_version"),
    Index("ix_answers_reuse_key", "reuse_key", "created_at"),
)

sources = Table(
    "sources",
    metadata,
    Column("id", Id, primary_key=True),
    Column("answer_id", Id, ForeignKey("answers.id", ondelete="CASCADE"), nullable=False),
    Column("chunk_index", Integer, nullable=False),
    Column("kind", String(20), nullable=False),  # web | retrievedContext | maps | other
    Column("title", Text),
    Column("uri", Text),
    Column("domain", Text),
    Column("text", Text),
    Column("place_id", String(200)),
    Column("document_name", Text),
    Column("file_search_store", Text),  # File Search retrievedContext (0004_chunk_fields)
    Column("custom_metadata", JSON),  # File Search document metadata, as sent
    Column("doc_id", String(512)),  # own retrieval: the document's id (0011_own_retrieval)
    Column("first_page", Integer),  # RAG Engine ragChunk.pageSpan, 1-indexed, inclusive
    Column("last_page", Integer),
    Column("destination", Text),
    # 0024: the destination's registrable domain (the desk's domain where ``domain`` is empty)
    Column("destination_domain", Text),
    # job.states.SourceState: pending resolved direct expired forbidden failed rejected no_uri
    Column("resolve_status", String(20), nullable=False),
    Column("resolve_http_status", Integer),
    Column("resolve_error", Text),
    Column("resolve_attempts", Integer, nullable=False, default=0),
    Column("resolved_at", UtcDateTime()),
    Column("resolve_latency_ms", Float),  # from the answer being stored to this resolution
    # 0018_source_policy: ok | flagged | dropped | reasked ([sources]); null: not judged
    Column("policy", String(10)),
    UniqueConstraint("answer_id", "chunk_index"),
    Index("ix_sources_resolve_status", "resolve_status"),
)

supports = Table(
    "supports",
    metadata,
    Column("id", Id, primary_key=True),
    Column("answer_id", Id, ForeignKey("answers.id", ondelete="CASCADE"), nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("part_index", Integer, nullable=False),
    Column("byte_start", Integer, nullable=False),  # within the part, UTF-8
    Column("byte_end", Integer, nullable=False),
    Column("char_start", Integer, nullable=False),  # code points, within the answer text
    Column("char_end", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("chunk_indices", JSON, nullable=False),
    Column("confidence_scores", JSON),  # null when the API sent none (2.5 and later)
    # "part": offsets read in segment.partIndex; "answer": over the visible text (no partIndex)
    Column("offsets_over", String(10), nullable=False, server_default="part"),
    Index("ix_supports_answer_id", "answer_id"),
)

structured = Table(
    "structured",
    metadata,
    Column("id", Id, primary_key=True),
    Column("question_id", Id, ForeignKey("questions.id", ondelete="CASCADE"), nullable=False),
    # Versioned like answers (0006_answer_versions): the latest has superseded_at null.
    Column("version", Integer, nullable=False, server_default="1"),
    Column("superseded_at", UtcDateTime()),
    Column("answer_version", Integer),  # the answer version this object was made from
    Column("schema_hash", String(64)),  # pipeline.structure.schema_hash of the schema used
    Column("valid", Boolean, nullable=False),
    Column("value", JSON),  # the object; null when the output was not JSON
    Column("raw_text", Text, nullable=False),  # the model's output as received
    Column("errors", JSON, nullable=False),  # validation errors of the stored output
    # [{path, value, supported, sources, in_answer}] per leaf (pipeline.structure.provenance)
    Column("provenance", JSON, nullable=False),
    Column("supported_fraction", Float),
    Column("flagged", Boolean, nullable=False),  # require_supported and a value unsupported
    Column("model_version", String(100)),
    Column("calls", Integer, nullable=False),  # 1, or 2 with the repair retry
    Column("created_at", UtcDateTime(), nullable=False),
    UniqueConstraint("question_id", "version", name="uq_structured_question_version"),
)

calls = Table(
    "calls",
    metadata,
    Column("id", Id, primary_key=True),
    # Null for a call made for no question (ground index's embeddings), which names its job.
    Column("question_id", Id, ForeignKey("questions.id", ondelete="CASCADE")),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE")),
    Column("step", String(20), nullable=False),  # ground | own | structure | embed
    Column("model", String(100), nullable=False),
    Column("started_at", UtcDateTime(), nullable=False),
    Column("latency_ms", Float, nullable=False),
    Column("http_status", Integer),  # null when no response came (timeout, reset)
    Column("outcome", String(50), nullable=False),  # ok, or the error class
    Column("input_tokens", Integer, nullable=False),  # prompt + tool use (billed as input)
    Column("output_tokens", Integer, nullable=False),  # candidates + thoughts
    Column("grounding_units", Integer, nullable=False),  # grounded prompts or billed queries
    Column("cost_micro_usd", BigInteger, nullable=False),  # rounded up; 0 for failed calls
    Column("cost_complete", Boolean, nullable=False),  # false: no price known for a part
    Index("ix_calls_question_id", "question_id"),
    Index("ix_calls_job_id", "job_id"),
)

# Limits shared by every process working on a job (pipeline.store.quota): one row per limit.
# ``requests`` and ``tokens`` are GCRA rows (``tat``: the theoretical arrival time, epoch
# seconds; ``rate``: the current shared rate per second, lowered by any process's 429);
# ``grounded_day`` counts grounded prompts (``used``) until ``resets_at``; ``budget`` holds
# micro-dollars spent (``used``, settled with the ledger rows) and reserved (``reserved``).
shared_limits = Table(
    "shared_limits",
    metadata,
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(20), primary_key=True),
    Column("ceiling", Float, nullable=False),  # the configured rate, or the limit
    Column("rate", Float, nullable=False),
    Column("tat", Float, nullable=False),
    Column("used", BigInteger, nullable=False),
    Column("reserved", BigInteger, nullable=False),
    Column("resets_at", Float, nullable=False),
    Column("last_decrease", Float, nullable=False),
    Column("last_increase", Float, nullable=False),
)

# What each live process holds of a job's budget reservation, so the share of a process that
# died can be given back once its hold expires (heartbeats extend it).
budget_holds = Table(
    "budget_holds",
    metadata,
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("owner", String(100), primary_key=True),
    Column("reserved", BigInteger, nullable=False),
    Column("expires_at", Float, nullable=False),  # epoch seconds
)

# batch mode (pipeline.batch.runner, pipeline.store.batches)
batches = Table(
    "batches",
    metadata,
    Column("id", Id, primary_key=True),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("step", String(20), nullable=False),  # ground | structure
    # ground-<job id>-<batch id>-<nonce>: unique, so a create whose answer was lost is found
    Column("display_name", String(200), nullable=False, unique=True),
    Column("name", String(200), unique=True),  # batches/{id}: stored the moment create answers
    Column("model", String(100), nullable=False),
    # ours: preparing -> uploaded -> submitted -> downloading -> done
    Column("phase", String(20), nullable=False),
    Column("state", String(40)),  # Google's JOB_STATE_*, as last polled
    Column("file_name", String(200)),  # the uploaded JSONL (files/{id})
    Column("responses_file", String(200)),
    Column("requests", Integer, nullable=False),
    # result lines stored, written in the same transaction as the rows they produced
    Column("lines_done", Integer, nullable=False, server_default="0"),
    Column("answered", Integer, nullable=False, server_default="0"),
    Column("failed_rows", Integer, nullable=False, server_default="0"),
    Column("returned", Integer, nullable=False, server_default="0"),  # given back to the queue
    # answers stored with / without groundingMetadata: did Google Search run in the batch?
    Column("grounded", Integer, nullable=False, server_default="0"),
    Column("ungrounded", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("submitted_at", UtcDateTime()),  # Google's createTime: the links age from here
    Column("finished_at", UtcDateTime()),  # Google's endTime
    Column("updated_at", UtcDateTime(), nullable=False),
    # 0012_vertex_batch: a Vertex batch's Cloud Storage files (null for Developer API batches)
    Column("input_uri", Text),  # gs://.../{display_name}.jsonl, the uploaded input
    Column("input_md5", String(32)),  # its base64 MD5: found with the same hash, not re-uploaded
    Column("output_uri_prefix", Text),  # outputConfig.gcsDestination.outputUriPrefix
    Column("output_dir", Text),  # outputInfo.gcsOutputDirectory, once Vertex reports it
    Column("cleaned_at", UtcDateTime()),  # when `ground batch clean` removed its files
    Index("ix_batches_job_phase", "job_id", "phase"),
)

batch_items = Table(
    "batch_items",
    metadata,
    Column("batch_id", Id, ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True),
    Column("question_id", Id, ForeignKey("questions.id", ondelete="CASCADE"), primary_key=True),
    # 0021_batch_followup: an own batch's request, as built when its file was written
    # (pipeline.store.batch_items): the passages, the search and the answer's note
    Column("own_request", JSON),
    Index("ix_batch_items_question_id", "question_id"),
)

# 0009_source_fingerprint: the question file a job last loaded (pipeline.store.queue)
source_loads = Table(
    "source_loads",
    metadata,
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("path", Text, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("mtime_ns", BigInteger, nullable=False),
    Column("digest", String(64), nullable=False),  # blake2b-256 of the content, hex
    Column("settings", String(64), nullable=False),  # digest of the [source] fields that shape rows
    Column("rows", BigInteger, nullable=False),
    Column("loaded_at", UtcDateTime(), nullable=False),
)

# 0011_own_retrieval: the job's own index (pipeline.store.documents)
EMBEDDING = LargeBinary().with_variant(postgresql.ARRAY(postgresql.REAL()), "postgresql")
documents = Table(
    "documents",
    metadata,
    Column("id", Id, primary_key=True),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("doc_id", String(512), nullable=False),  # the input's own id: the key
    Column("title", Text),
    Column("uri", Text),
    Column("meta", JSON),
    # blake2b-256 of what shapes the chunks (text, title and the chunk settings), hex
    Column("content_hash", String(64), nullable=False),
    Column("chunks", Integer, nullable=False),
    Column("loaded_at", UtcDateTime(), nullable=False),
    UniqueConstraint("job_id", "doc_id"),
)

chunks = Table(
    "chunks",
    metadata,
    Column("id", Id, primary_key=True),
    Column("document_id", Id, ForeignKey("documents.id", ondelete="CASCADE"), nullable=False),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("char_start", Integer, nullable=False),  # the chunk's span in the document's text
    Column("char_end", Integer, nullable=False),
    Column("text", Text, nullable=False),
    # Null until embedded: float32 little-endian bytes on SQLite (sqlite-vec's layout), a
    # real[] on PostgreSQL (pgvector casts it to a vector).
    Column("embedding", EMBEDDING),
    UniqueConstraint("document_id", "ordinal"),
    Index("ix_chunks_job_id", "job_id"),
)

# A question's embedding for dense own retrieval (task RETRIEVAL_QUERY), made once: a rerun
# after a crash finds it here and does not pay for it again. Keyed by what was embedded (the
# text's blake2b-256, hex) under a model and size, so questions with the same text share one.
query_vectors = Table(
    "query_vectors",
    metadata,
    Column("id", Id, primary_key=True),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("text_hash", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("dimensions", Integer, nullable=False),  # as asked; 0 = the model's own
    Column("embedding", EMBEDDING, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    UniqueConstraint("job_id", "text_hash", "model", "dimensions"),
)

# Each dialect's full-text machinery over chunks.text, made by the migration only: SQLite's
# FTS5 table (and its shadow tables), PostgreSQL's generated tsvector column and GIN index.
FULL_TEXT_TABLES_PREFIX = "chunks_fts"
FULL_TEXT_COLUMN = "tsv"
FULL_TEXT_INDEX = "ix_chunks_tsv"
# 0019_reviews: the same for the review desk's search over questions and answers.
DESK_TEXT_TABLES_PREFIX = "desk_fts"
DESK_TEXT_COLUMN = "desk_tsv"
DESK_TEXT_INDEX = "ix_questions_desk_tsv"


def include_in_autogenerate(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Alembic's ``include_object``: leave out the dialect-only full-text objects above."""
    if name is None:
        return True
    if type_ == "table":
        return not name.startswith((FULL_TEXT_TABLES_PREFIX, DESK_TEXT_TABLES_PREFIX))
    if type_ == "column":
        dialect_only = name in (FULL_TEXT_COLUMN, DESK_TEXT_COLUMN)
        return not (dialect_only and getattr(obj, "table", None) is not None)
    if type_ == "index":
        return name not in (FULL_TEXT_INDEX, DESK_TEXT_INDEX)
    return True


# 0016_citation_verdicts: one verdict per checked (claim, cited source) pair (pipeline.verify).
citation_verdicts = Table(
    "citation_verdicts",
    metadata,
    Column("id", Id, primary_key=True),
    Column("answer_id", Id, ForeignKey("answers.id", ondelete="CASCADE"), nullable=False),
    Column("question_id", Id, ForeignKey("questions.id", ondelete="CASCADE"), nullable=False),
    Column("claim_index", Integer, nullable=False),  # the support's ordinal
    Column("target", Text, nullable=False),  # the URL, or chunk:<index> (own text)
    Column("url", Text),
    Column("chunk_index", Integer),
    Column("verdict", String(20), nullable=False),
    Column("quote", Text),
    Column("retrieval_status", String(50)),  # urlContextMetadata's, or own_text
    Column("model", String(100), nullable=False),
    Column("call_id", Id, ForeignKey("calls.id", ondelete="SET NULL")),  # its ledger row
    Column("created_at", UtcDateTime(), nullable=False),
    # 0023: why the judge's verdict was not taken (no_verdict), or the flag on a kept one.
    Column("reason", String(200)),
    UniqueConstraint("answer_id", "claim_index", "target", "model"),
    Index("ix_citation_verdicts_question_id", "question_id"),
)


# 0019_reviews: people's decisions on answers (pipeline.store.reviews), never updated: the
# newest decision on a question's latest answer version is its review status.
reviews = Table(
    "reviews",
    metadata,
    Column("id", Id, primary_key=True),
    Column("question_id", Id, ForeignKey("questions.id", ondelete="CASCADE"), nullable=False),
    Column("answer_id", Id, ForeignKey("answers.id", ondelete="CASCADE")),
    Column("answer_version", Integer),  # the version judged (null: no answer stored)
    Column("verdict", String(20), nullable=False),  # approved | rejected | needs_edit
    Column("reviewer", String(200), nullable=False),
    Column("note", Text),
    Column("created_at", UtcDateTime(), nullable=False),
    Index("ix_reviews_question_id", "question_id", "id"),
)


# 0020_notify_deliveries: [notify]'s outbox (pipeline.store.notify_deliveries): each webhook
# event, written when it happens, delivered after; the message_id is its webhook-id.
notify_deliveries = Table(
    "notify_deliveries",
    metadata,
    Column("id", Id, primary_key=True),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("message_id", String(64), nullable=False, unique=True),
    Column("event", String(50), nullable=False),
    Column("body", Text, nullable=False),  # the JSON POSTed, byte for byte
    Column("state", String(10), nullable=False),  # pending | sent | failed
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text),  # a status or an exception's name: no URL, no secret
    Column("created_at", UtcDateTime(), nullable=False),
    Column("next_at", UtcDateTime(), nullable=False),  # the next attempt, not before
    Column("sent_at", UtcDateTime()),
    Index("ix_notify_deliveries_job_id", "job_id", "state"),
)


# 0022_billing: what `ground reconcile` found (pipeline.store.ledger): the ledger against the
# Cloud Billing export for one job, per SKU family (``families``: JSON), and the gap.
reconciliations = Table(
    "reconciliations",
    metadata,
    Column("id", Id, primary_key=True),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("reconciled_at", UtcDateTime(), nullable=False),
    Column("source", Text, nullable=False),  # the export file's name (no credential)
    Column("matched_by", String(20), nullable=False),  # labels | project
    Column("period_start", UtcDateTime()),  # the matched rows' first usage start
    Column("period_end", UtcDateTime()),  # ... and last usage end
    Column("ledger_micro", BigInteger, nullable=False),  # the ledger's spend, micro-dollars
    Column("billed_micro", BigInteger, nullable=False),  # the export's, credits applied
    Column("unattributed_micro", BigInteger, nullable=False),  # rows of no known family
    Column("families", JSON, nullable=False),
    Index("ix_reconciliations_job_id", "job_id", "id"),
)

# 0022_billing: billed search queries per grounded request, per model and backend, as the
# latest reconciliation that saw grounded requests of it taught (one row each).
billing_factors = Table(
    "billing_factors",
    metadata,
    Column("model", String(100), primary_key=True),
    Column("backend", String(20), primary_key=True),
    Column("queries_per_request", Float, nullable=False),
    Column("grounded_requests", Integer, nullable=False),
    Column("billed_queries", Float, nullable=False),
    Column("period_start", UtcDateTime()),
    Column("period_end", UtcDateTime()),
    Column("learned_at", UtcDateTime(), nullable=False),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="SET NULL")),  # where it was learned
)
