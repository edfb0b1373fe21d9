"""Every chunk kind with its own fields, and what else a grounded answer carried.

Sources gain the File Search fields of a ``retrievedContext`` chunk (``fileSearchStore``,
``customMetadata``). Answers gain the Maps widget token (needed to render the widget the terms
ask for), the legacy dynamic-retrieval score, the ``urlContextMetadata`` statuses and the count
of tool-call / code parts (kept in the raw body). Supports say which text their offsets ran
over ("part" or "answer").

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sources") as batch:
        batch.add_column(sa.Column("file_search_store", sa.Text(), nullable=True))
        batch.add_column(sa.Column("custom_metadata", sa.JSON(), nullable=True))
    with op.batch_alter_table("answers") as batch:
        batch.add_column(sa.Column("maps_widget_token", sa.Text(), nullable=True))
        batch.add_column(sa.Column("dynamic_retrieval_score", sa.Float(), nullable=True))
        batch.add_column(sa.Column("url_context_statuses", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("tool_parts", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("supports") as batch:
        batch.add_column(
            sa.Column("offsets_over", sa.String(length=10), nullable=False, server_default="part")
        )


def downgrade() -> None:
    with op.batch_alter_table("supports") as batch:
        batch.drop_column("offsets_over")
    with op.batch_alter_table("answers") as batch:
        batch.drop_column("tool_parts")
        batch.drop_column("url_context_statuses")
        batch.drop_column("dynamic_retrieval_score")
        batch.drop_column("maps_widget_token")
    with op.batch_alter_table("sources") as batch:
        batch.drop_column("custom_metadata")
        batch.drop_column("file_search_store")
