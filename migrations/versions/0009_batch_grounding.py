"""Batch mode: per batch, how many answers came back grounded and how many ungrounded.

Google Search in batch is reported as supported but unconfirmed; these counts are how a run
detects (and ``ground status`` shows) a batch whose search did not run. ``down_revision`` is
this branch's head and is re-chained at merge.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("grounded", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("ungrounded", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("ungrounded")
        batch.drop_column("grounded")
