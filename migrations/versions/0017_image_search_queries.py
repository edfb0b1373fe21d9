"""The image searches Google Search ran for an answer.

* ``answers.image_search_queries``: ``groundingMetadata.imageSearchQueries`` as sent (a JSON
  list of strings), set by ``googleSearch`` with ``searchTypes.imageSearch`` (python-genai
  v1.65, 2026); ``[]`` when the response had none. Null on answers stored before this
  revision (exported as ``[]``; their raw responses still hold the field when it was sent).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("answers", recreate="never") as batch:
        batch.add_column(sa.Column("image_search_queries", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("answers", recreate="never") as batch:
        batch.drop_column("image_search_queries")
