"""What an answer was asked, and under which settings: edited questions and reused answers.

* ``answers.asked_text``: the question's text when this answer was asked, recorded when the
  text has changed since (``[source] on_change = "reask"``); null: the question's current
  text.
* ``answers.settings``: a fingerprint of what shapes an answer besides the question (model,
  tools, prompt template, system instruction, temperature, output bound); null for answers
  stored before it was recorded.
* ``answers.reuse_key``: the fingerprint together with the text asked: answers with equal
  keys answer the same request. ``[job] reuse_answers_within`` looks an answer up by it,
  within a job and across the jobs of one database (indexed).
* ``answers.reused_from``: the answer (``answers.id``) this one was copied from, at no cost;
  null: asked.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("answers", recreate="never") as batch:
        batch.add_column(sa.Column("asked_text", sa.Text(), nullable=True))
        batch.add_column(sa.Column("settings", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("reuse_key", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("reused_from", sa.BigInteger(), nullable=True))
    op.create_index("ix_answers_reuse_key", "answers", ["reuse_key", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_answers_reuse_key", table_name="answers")
    with op.batch_alter_table("answers", recreate="never") as batch:
        batch.drop_column("reused_from")
        batch.drop_column("reuse_key")
        batch.drop_column("settings")
        batch.drop_column("asked_text")
