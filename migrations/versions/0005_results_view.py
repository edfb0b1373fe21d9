"""A ``results`` view: one row per question, for SQL users and BI tools (no joins needed).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The sources as one JSON array per answer, in chunk order; the two dialects spell it apart.
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
    q.updated_at
FROM questions q
JOIN jobs j ON j.id = q.job_id
LEFT JOIN answers a ON a.question_id = q.id
LEFT JOIN structured s ON s.question_id = q.id
"""


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    sources = _SOURCES_JSON.get(dialect, "NULL")
    op.execute(_VIEW.format(sources=sources))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS results")
