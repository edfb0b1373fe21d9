"""Shared limits for many worker processes, and the queue at a million rows.

* ``shared_limits``: the job's rate (requests and tokens per minute, GCRA rows), the daily
  grounding count and the budget, kept in the database so every process draws from one quota.
* ``budget_holds``: each live process's share of the budget reservation.
* ``ix_questions_claimable``: a partial index over the claimable states only.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
CLAIMABLE_SQL = "state IN ('pending', 'retry_wait', 'awaiting_structure', 'running')"


def upgrade() -> None:
    op.create_table(
        "shared_limits",
        sa.Column("job_id", Id, nullable=False),
        sa.Column("name", sa.String(length=20), nullable=False),
        sa.Column("ceiling", sa.Float(), nullable=False),
        sa.Column("rate", sa.Float(), nullable=False),
        sa.Column("tat", sa.Float(), nullable=False),
        sa.Column("used", sa.BigInteger(), nullable=False),
        sa.Column("reserved", sa.BigInteger(), nullable=False),
        sa.Column("resets_at", sa.Float(), nullable=False),
        sa.Column("last_decrease", sa.Float(), nullable=False),
        sa.Column("last_increase", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_shared_limits_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "name", name=op.f("pk_shared_limits")),
    )
    op.create_table(
        "budget_holds",
        sa.Column("job_id", Id, nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("reserved", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_budget_holds_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "owner", name=op.f("pk_budget_holds")),
    )
    op.create_index(
        "ix_questions_claimable",
        "questions",
        ["job_id", "id"],
        sqlite_where=sa.text(CLAIMABLE_SQL),
        postgresql_where=sa.text(CLAIMABLE_SQL),
    )


def downgrade() -> None:
    op.drop_index("ix_questions_claimable", table_name="questions")
    op.drop_table("budget_holds")
    op.drop_table("shared_limits")
