"""The fingerprint of the question file a job last loaded: a run skips re-reading it unchanged.

One row per job (the job has one source). ``size`` and ``mtime_ns`` are compared first (equal:
unchanged, nothing read); otherwise the content's ``digest`` decides, so a touched or copied
file is not loaded again. ``settings`` is a digest of what shapes the rows (the ``[source]``
fields and ``max_question_chars``): changing them reloads. ``rows`` is the load's count, what a
skipped load reports. A ``[source] query`` has no fingerprint: it is always read.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "source_loads",
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("settings", sa.String(length=64), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("loaded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_source_loads_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_source_loads")),
    )


def downgrade() -> None:
    op.drop_table("source_loads")
