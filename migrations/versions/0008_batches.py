"""Batch mode: the Gemini batches a job submitted, and which questions each one holds.

``batches`` keeps a batch's name from the moment ``create`` answers (before anything else
is done), its file, Google's state, and how far its result file has been stored
(``lines_done``, written in the same transaction as the rows it counts). ``batch_items`` maps
questions to the batch they were leased to. Numbered 0007 after the parallel branch's 0006;
``down_revision`` is this branch's head and is re-chained at merge.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("step", sa.String(length=20), nullable=False),
        sa.Column("display_name", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("phase", sa.String(length=20), nullable=False),
        sa.Column("state", sa.String(length=40), nullable=True),
        sa.Column("file_name", sa.String(length=200), nullable=True),
        sa.Column("responses_file", sa.String(length=200), nullable=True),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("lines_done", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("answered", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("failed_rows", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("returned", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_batches_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
        sa.UniqueConstraint("display_name", name=op.f("uq_batches_display_name")),
        sa.UniqueConstraint("name", name=op.f("uq_batches_name")),
    )
    op.create_index("ix_batches_job_phase", "batches", ["job_id", "phase"])
    op.create_table(
        "batch_items",
        sa.Column("batch_id", _ID, nullable=False),
        sa.Column("question_id", _ID, nullable=False),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["batches.id"],
            name=op.f("fk_batch_items_batch_id_batches"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["question_id"],
            ["questions.id"],
            name=op.f("fk_batch_items_question_id_questions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("batch_id", "question_id", name=op.f("pk_batch_items")),
    )
    op.create_index("ix_batch_items_question_id", "batch_items", ["question_id"])


def downgrade() -> None:
    op.drop_index("ix_batch_items_question_id", table_name="batch_items")
    op.drop_table("batch_items")
    op.drop_index("ix_batches_job_phase", table_name="batches")
    op.drop_table("batches")
