"""``[notify]``'s outbox: every webhook event, written when it happens, then delivered.

* ``notify_deliveries``: one row per event of a job: its ``message_id`` (the
  ``webhook-id``, the same on every attempt and across runs), its name and JSON body, its
  ``state`` (pending, sent, failed), the attempts made, when the next may be made
  (``next_at``: a claim's lease while an attempt is under way, then the backoff) and the
  last error (a status or an exception's name: never a URL or a secret). A run that dies
  before an event is delivered leaves it pending: the next run of the job sends it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "notify_deliveries",
        sa.Column("id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("message_id", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=50), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_notify_deliveries_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_deliveries")),
        sa.UniqueConstraint("message_id", name=op.f("uq_notify_deliveries_message_id")),
    )
    op.create_index(
        "ix_notify_deliveries_job_id", "notify_deliveries", ["job_id", "state"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_notify_deliveries_job_id", table_name="notify_deliveries")
    op.drop_table("notify_deliveries")
