"""Dense own retrieval at run time: the questions' embeddings.

* ``query_vectors``: one row per text embedded as a query (``RETRIEVAL_QUERY``) for a job,
  unique on the job, the text's blake2b-256 (hex), the model and the size asked for; the
  vector as the chunks store theirs (float32 little-endian bytes on SQLite, ``real[]`` on
  PostgreSQL). Written in the same transaction as the embedding call's ledger row, so a run
  killed part-way and started again never pays for a stored vector twice.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "query_vectors",
        sa.Column("id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("text_hash", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column(
            "embedding",
            sa.LargeBinary().with_variant(postgresql.ARRAY(postgresql.REAL()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_query_vectors_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_query_vectors")),
        sa.UniqueConstraint(
            "job_id", "text_hash", "model", "dimensions", name=op.f("uq_query_vectors_job_id")
        ),
    )


def downgrade() -> None:
    op.drop_table("query_vectors")
