"""Which path answered, and which path a question's next call 1 takes.

* ``answers.route``: ``managed`` for an answer of the grounded call (Google Search, a data
  store, a connector: the platform retrieved), ``own`` for one of own retrieval (the job's
  index searched, the passages numbered in the prompt, the citations constructed from the
  model's markers). ``ground status --by class`` compares the two per class. Existing
  answers are managed.
* ``questions.next_route``: ``own`` when the question's next call 1 goes through own
  retrieval whatever its class (a managed answer that missed, handed over by
  ``[grounding] fallback_when``; ``ground retry --via own_retrieval``); null: the job's
  routing. Cleared when an own answer is stored.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("answers", recreate="never") as batch:
        batch.add_column(
            sa.Column("route", sa.String(length=10), nullable=False, server_default="managed")
        )
    with op.batch_alter_table("questions", recreate="never") as batch:
        batch.add_column(sa.Column("next_route", sa.String(length=10), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("questions", recreate="never") as batch:
        batch.drop_column("next_route")
    with op.batch_alter_table("answers", recreate="never") as batch:
        batch.drop_column("route")
