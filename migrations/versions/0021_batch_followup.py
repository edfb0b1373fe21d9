"""Own retrieval in batch mode: what a question's own-retrieval request was built from.

* ``batch_items.own_request``: for a question in an ``own`` batch, the passages its request
  numbered (doc_id, title, uri, text, in prompt order), the search that found them and the
  note its answer carries; written when the batch's file is written, read back when its
  result line is stored, so the answer's citations are built from exactly what was sent.
  Null for the questions of ``ground`` and ``structure`` batches.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batch_items", recreate="never") as batch:
        batch.add_column(sa.Column("own_request", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batch_items", recreate="never") as batch:
        batch.drop_column("own_request")
