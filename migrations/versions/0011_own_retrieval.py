"""Own retrieval: the job's documents and their chunks, full-text indexed; embedding calls in
the ledger; the connectors' chunk fields on sources.

* ``documents``: one row per document of ``[retrieval]`` (unique on the job and the
  document's own id), with the hash of its content: a changed document is re-chunked.
* ``chunks``: the document's chunks (character spans and text), and the embedding once made
  (float32 little-endian bytes on SQLite, ``real[]`` on PostgreSQL; null until then).
* Full text: on SQLite an FTS5 table over ``chunks.text`` (external content, kept in step by
  triggers; ``unicode61`` with diacritics folded, porter stemming; bm25 ranks it); on
  PostgreSQL a generated ``tsvector`` column (``english``) with a GIN index
  (``websearch_to_tsquery`` / ``ts_rank_cd``). Neither is in ``pipeline.store.tables``: each
  is one dialect's, and
  :func:`pipeline.store.tables.include_in_autogenerate` leaves them out of comparisons.
* ``calls``: ``question_id`` may be null for a call made for no question (the embeddings of
  ``ground index``), which then names its ``job_id``.
* ``sources``: ``doc_id`` (own retrieval's document), ``first_page`` / ``last_page`` (a RAG
  Engine ``ragChunk.pageSpan``).

SQLite rebuilds ``calls`` to make a column nullable; the ``results`` view over it is dropped
first and created again from its own stored SQL.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# The text search configuration of the PostgreSQL column: English stemming ("airports"
# finds "airport"), as SQLite's porter tokenizer does; other languages' words match as
# written.
TEXT_SEARCH_CONFIG = "english"

_SQLITE_FTS = [
    """CREATE VIRTUAL TABLE chunks_fts USING fts5(
        text, content='chunks', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
    END""",
    """CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END""",
    """CREATE TRIGGER chunks_fts_update AFTER UPDATE OF text ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
    END""",
]
_POSTGRES_FTS = [
    "ALTER TABLE chunks ADD COLUMN tsv tsvector"
    f" GENERATED ALWAYS AS (to_tsvector('{TEXT_SEARCH_CONFIG}', text)) STORED",
    "CREATE INDEX ix_chunks_tsv ON chunks USING GIN (tsv)",
]


def _view_sql() -> str | None:
    """The ``results`` view's SQL as SQLite stored it (None on other dialects or when absent)."""
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return None
    return bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = 'results'")
    ).scalar()


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("doc_id", sa.String(length=512), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("uri", sa.Text(), nullable=True),
        sa.Column("meta", sa.JSON(), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("loaded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_documents_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_documents")),
        sa.UniqueConstraint("job_id", "doc_id", name=op.f("uq_documents_job_id")),
    )
    op.create_table(
        "chunks",
        sa.Column("id", _ID, nullable=False),
        sa.Column("document_id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("char_start", sa.Integer(), nullable=False),
        sa.Column("char_end", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column(
            "embedding",
            sa.LargeBinary().with_variant(postgresql.ARRAY(postgresql.REAL()), "postgresql"),
            nullable=True,
        ),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name=op.f("fk_chunks_document_id_documents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_chunks_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunks")),
        sa.UniqueConstraint("document_id", "ordinal", name=op.f("uq_chunks_document_id")),
    )
    op.create_index("ix_chunks_job_id", "chunks", ["job_id"])
    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_FTS if dialect == "sqlite" else _POSTGRES_FTS:
        op.execute(statement)

    view = _view_sql()
    if view is not None:
        op.execute("DROP VIEW results")
    with op.batch_alter_table("calls") as batch:
        batch.alter_column("question_id", existing_type=_ID, nullable=True)
        batch.add_column(sa.Column("job_id", _ID, nullable=True))
        batch.create_foreign_key(
            "fk_calls_job_id_jobs", "jobs", ["job_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_calls_job_id", ["job_id"])
    if view is not None:
        op.execute(view)
    with op.batch_alter_table("sources", recreate="never") as batch:
        batch.add_column(sa.Column("doc_id", sa.String(length=512), nullable=True))
        batch.add_column(sa.Column("first_page", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("last_page", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sources", recreate="never") as batch:
        batch.drop_column("last_page")
        batch.drop_column("first_page")
        batch.drop_column("doc_id")
    view = _view_sql()
    if view is not None:
        op.execute("DROP VIEW results")
    op.execute("DELETE FROM calls WHERE question_id IS NULL")
    with op.batch_alter_table("calls") as batch:
        batch.drop_index("ix_calls_job_id")
        batch.drop_constraint("fk_calls_job_id_jobs", type_="foreignkey")
        batch.drop_column("job_id")
        batch.alter_column("question_id", existing_type=_ID, nullable=False)
    if view is not None:
        op.execute(view)
    if op.get_bind().dialect.name == "sqlite":
        for name in ("chunks_fts_update", "chunks_fts_delete", "chunks_fts_insert"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS chunks_fts")
    op.drop_index("ix_chunks_job_id", table_name="chunks")
    op.drop_table("chunks")
    op.drop_table("documents")
