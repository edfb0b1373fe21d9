"""Reconciliation against the Cloud Billing export (``ground reconcile``).

* ``reconciliations``: one row per reconciliation of a job: the ledger's spend against the
  export's (credits applied), per SKU family, and what could not be attributed.
* ``billing_factors``: per model and backend, the billed search queries per grounded request
  the latest reconciliation taught, with the usage period it came from. The budget's worst
  case, the estimate and status count at least that many queries per grounded response.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "reconciliations",
        sa.Column("id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("reconciled_at", _utc(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("matched_by", sa.String(length=20), nullable=False),
        sa.Column("period_start", _utc(), nullable=True),
        sa.Column("period_end", _utc(), nullable=True),
        sa.Column("ledger_micro", sa.BigInteger(), nullable=False),
        sa.Column("billed_micro", sa.BigInteger(), nullable=False),
        sa.Column("unattributed_micro", sa.BigInteger(), nullable=False),
        sa.Column("families", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_reconciliations_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reconciliations")),
    )
    op.create_index("ix_reconciliations_job_id", "reconciliations", ["job_id", "id"], unique=False)
    op.create_table(
        "billing_factors",
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("backend", sa.String(length=20), nullable=False),
        sa.Column("queries_per_request", sa.Float(), nullable=False),
        sa.Column("grounded_requests", sa.Integer(), nullable=False),
        sa.Column("billed_queries", sa.Float(), nullable=False),
        sa.Column("period_start", _utc(), nullable=True),
        sa.Column("period_end", _utc(), nullable=True),
        sa.Column("learned_at", _utc(), nullable=False),
        sa.Column("job_id", _ID, nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_billing_factors_job_id_jobs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("model", "backend", name=op.f("pk_billing_factors")),
    )


def downgrade() -> None:
    op.drop_table("billing_factors")
    op.drop_index("ix_reconciliations_job_id", table_name="reconciliations")
    op.drop_table("reconciliations")
