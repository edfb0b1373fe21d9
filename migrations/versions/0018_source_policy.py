"""Source policies on resolved destinations (``[sources]``).

* ``sources.policy``: what the job's ``[sources]`` rules made of the source's resolved
  destination: ``ok``, ``flagged``, ``dropped`` (its citations left out of every read and
  export; the row itself kept) or ``reasked`` (its question asked once more). Null while the
  source has no destination, or was stored before this revision and not judged since.
* ``answers.coverage_answered``: the answer's coverage as answered, kept when dropped sources
  lowered ``coverage``; null when nothing was dropped.
* ``questions.avoid_domains``: the domains a queued re-ask names in its prompt (a JSON list);
  null when none is queued.
* ``answers.avoided_domains``: the domains the prompt of this answer named (a re-ask's
  answer); null for an answer asked plainly. A question is re-asked at most once.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sources", recreate="never") as batch:
        batch.add_column(sa.Column("policy", sa.String(10), nullable=True))
    with op.batch_alter_table("answers", recreate="never") as batch:
        batch.add_column(sa.Column("coverage_answered", sa.Float(), nullable=True))
        batch.add_column(sa.Column("avoided_domains", sa.JSON(), nullable=True))
    with op.batch_alter_table("questions", recreate="never") as batch:
        batch.add_column(sa.Column("avoid_domains", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("questions", recreate="never") as batch:
        batch.drop_column("avoid_domains")
    with op.batch_alter_table("answers", recreate="never") as batch:
        batch.drop_column("avoided_domains")
        batch.drop_column("coverage_answered")
    with op.batch_alter_table("sources", recreate="never") as batch:
        batch.drop_column("policy")
