"""Structured outputs (call 2) and a ledger of every call with its cost.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("questions") as batch:
        batch.add_column(
            sa.Column("structure_attempts", sa.Integer(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("questions") as batch:
        batch.alter_column("structure_attempts", server_default=None)
    op.create_table(
        "structured",
        sa.Column("id", Id, nullable=False),
        sa.Column("question_id", Id, nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("raw_text", sa.Text(), nullable=False),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.Column("supported_fraction", sa.Float(), nullable=True),
        sa.Column("flagged", sa.Boolean(), nullable=False),
        sa.Column("model_version", sa.String(length=100), nullable=True),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["question_id"],
            ["questions.id"],
            name=op.f("fk_structured_question_id_questions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_structured")),
        sa.UniqueConstraint("question_id", name=op.f("uq_structured_question_id")),
    )
    op.create_table(
        "calls",
        sa.Column("id", Id, nullable=False),
        sa.Column("question_id", Id, nullable=False),
        sa.Column("step", sa.String(length=20), nullable=False),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=50), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("grounding_units", sa.Integer(), nullable=False),
        sa.Column("cost_micro_usd", sa.BigInteger(), nullable=False),
        sa.Column("cost_complete", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["question_id"],
            ["questions.id"],
            name=op.f("fk_calls_question_id_questions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calls")),
    )
    op.create_index("ix_calls_question_id", "calls", ["question_id"])


def downgrade() -> None:
    op.drop_index("ix_calls_question_id", table_name="calls")
    op.drop_table("calls")
    op.drop_table("structured")
    with op.batch_alter_table("questions") as batch:
        batch.drop_column("structure_attempts")
