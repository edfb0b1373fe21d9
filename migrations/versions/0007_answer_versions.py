"""Answers and structured objects are versioned; nothing paid for is ever deleted.

``answers`` and ``structured`` get a ``version`` (every existing row becomes version 1) and a
``superseded_at`` (null: the latest version, the one every reader reads); the one-per-question
unique keys become (question_id, version). Answers get ``changed`` / ``changes`` (against the
version before), structured objects the ``schema_hash`` and ``answer_version`` they were made
with, questions a ``reask`` flag (call 1 to be made again while the stored answer stays).

The ``results`` view reads the latest versions; it is dropped around the table changes (SQLite
rebuilds a table in batch mode, which a view over it would break) and created again.

SQLite can only drop a unique constraint by rebuilding the table, and with ``foreign_keys=ON``
(set on every connection; a pragma that cannot change inside the migration's transaction)
dropping the old ``answers`` table deletes its sources and supports through ``ON DELETE
CASCADE``. So on SQLite those two are copied aside first and put back after (ids kept), and
``questions``, which everything hangs off, is only ever altered in place, never rebuilt.

The downgrade keeps only the latest version of each answer and structured object.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The sources as one JSON array per answer, in chunk order; the two dialects spell it apart.
# (As in 0005_results_view; repeated so that this revision stands on its own.)
_SOURCES_JSON = {
    "postgresql": """(
        SELECT json_agg(json_build_object(
            'index', src.chunk_index, 'kind', src.kind, 'title', src.title, 'uri', src.uri,
            'domain', src.domain, 'destination', src.destination,
            'resolve_status', src.resolve_status) ORDER BY src.chunk_index)
        FROM sources src WHERE src.answer_id = a.id)""",
    "sqlite": """(
        SELECT json_group_array(json_object(
            'index', o.chunk_index, 'kind', o.kind, 'title', o.title, 'uri', o.uri,
            'domain', o.domain, 'destination', o.destination,
            'resolve_status', o.resolve_status))
        FROM (SELECT * FROM sources src WHERE src.answer_id = a.id
              ORDER BY src.chunk_index) AS o)""",
}

_VIEW = """
CREATE VIEW results AS
SELECT
    q.id AS question_id,
    j.name AS job,
    q.qid AS id,
    q.text AS question,
    q.qclass AS class,
    q.meta AS metadata,
    q.state,
    a.grounded,
    a.text AS answer,
    a.created_at AS answered_at,
    a.model_version,
    a.finish_reason,
    a.web_search_queries,
    a.retrieval_queries,
    a.coverage,
    a.search_entry_point_html,
    a.prompt_tokens,
    a.candidates_tokens,
    a.tool_use_prompt_tokens,
    a.thoughts_tokens,
    a.total_tokens,
    a.latency_ms,
    {sources} AS sources,
    (SELECT COUNT(*) FROM sources src WHERE src.answer_id = a.id) AS source_count,
    (SELECT COUNT(*) FROM sources src
        WHERE src.answer_id = a.id AND src.destination IS NOT NULL) AS destinations_known,
    s.value AS structured,
    s.valid AS structured_valid,
    s.supported_fraction,
    s.flagged AS structured_flagged,
    (SELECT COUNT(*) FROM calls c WHERE c.question_id = q.id) AS calls,
    (SELECT COALESCE(SUM(c.cost_micro_usd), 0) FROM calls c
        WHERE c.question_id = q.id) / 1000000.0 AS cost_usd,
    q.attempts,
    q.error_class,
    q.last_error,
    q.updated_at{versions}
FROM questions q
JOIN jobs j ON j.id = q.job_id
LEFT JOIN answers a ON a.question_id = q.id{latest_answer}
LEFT JOIN structured s ON s.question_id = q.id{latest_structured}
"""

_VERSION_COLUMNS = """,
    a.version AS answer_version,
    a.changed AS answer_changed,
    s.schema_hash AS structured_schema_hash"""


def _create_view(versioned: bool) -> None:
    sources = _SOURCES_JSON.get(op.get_bind().dialect.name, "NULL")
    op.execute(
        _VIEW.format(
            sources=sources,
            versions=_VERSION_COLUMNS if versioned else "",
            latest_answer=" AND a.superseded_at IS NULL" if versioned else "",
            latest_structured=" AND s.superseded_at IS NULL" if versioned else "",
        )
    )


_ANSWER_CHILDREN = ("sources", "supports")


def _keep_answer_children() -> bool:
    """On SQLite, copy the answers' children aside before ``answers`` is rebuilt."""
    if op.get_bind().dialect.name != "sqlite":
        return False
    for table in _ANSWER_CHILDREN:
        op.execute(f"DROP TABLE IF EXISTS _keep_{table}")
        op.execute(f"CREATE TABLE _keep_{table} AS SELECT * FROM {table}")
    return True


def _restore_answer_children() -> None:
    for table in _ANSWER_CHILDREN:
        op.execute(f"DELETE FROM {table}")  # what the cascade left, if anything
        op.execute(f"INSERT INTO {table} SELECT * FROM _keep_{table}")
        op.execute(f"DROP TABLE _keep_{table}")


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS results")
    with op.batch_alter_table("questions", recreate="never") as batch:
        batch.add_column(
            sa.Column("reask", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    kept = _keep_answer_children()
    with op.batch_alter_table("answers") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("superseded_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("changed", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("changes", sa.JSON(), nullable=True))
        batch.drop_constraint("uq_answers_question_id", type_="unique")
        batch.create_unique_constraint("uq_answers_question_version", ["question_id", "version"])
    if kept:
        _restore_answer_children()
    with op.batch_alter_table("structured") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("superseded_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("answer_version", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("schema_hash", sa.String(length=64), nullable=True))
        batch.drop_constraint("uq_structured_question_id", type_="unique")
        batch.create_unique_constraint("uq_structured_question_version", ["question_id", "version"])
    # Every existing object was made from the only answer there was: version 1.
    op.execute("UPDATE structured SET answer_version = 1")
    _create_view(versioned=True)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS results")
    # One row per question again: the latest version stays, the history goes (children first).
    old_answers = "SELECT id FROM answers WHERE superseded_at IS NOT NULL"
    op.execute(f"DELETE FROM supports WHERE answer_id IN ({old_answers})")
    op.execute(f"DELETE FROM sources WHERE answer_id IN ({old_answers})")
    op.execute("DELETE FROM answers WHERE superseded_at IS NOT NULL")
    op.execute("DELETE FROM structured WHERE superseded_at IS NOT NULL")
    with op.batch_alter_table("structured") as batch:
        batch.drop_constraint("uq_structured_question_version", type_="unique")
        batch.create_unique_constraint("uq_structured_question_id", ["question_id"])
        batch.drop_column("schema_hash")
        batch.drop_column("answer_version")
        batch.drop_column("superseded_at")
        batch.drop_column("version")
    kept = _keep_answer_children()
    with op.batch_alter_table("answers") as batch:
        batch.drop_constraint("uq_answers_question_version", type_="unique")
        batch.create_unique_constraint("uq_answers_question_id", ["question_id"])
        batch.drop_column("changes")
        batch.drop_column("changed")
        batch.drop_column("superseded_at")
        batch.drop_column("version")
    if kept:
        _restore_answer_children()
    with op.batch_alter_table("questions", recreate="never") as batch:
        batch.drop_column("reask")
    _create_view(versioned=False)
