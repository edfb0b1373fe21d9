"""Verified answers: one verdict per checked (claim, cited source) pair.

* ``citation_verdicts``: the answer and question checked, the claim's index (its support's
  ordinal), what was read (``target``: the destination URL, or ``chunk:<index>`` for a source
  checked against its own text; ``url`` the URL, null for those), the verdict (supported,
  partly, not_supported, contradicted, unreadable, no_verdict), the deciding quote, the URL's
  ``urlContextMetadata`` retrieval status (``own_text`` for a text source), the model and the
  ledger row of the call that decided it. Unique per (answer, claim, target, model): a rerun
  never pays twice for a stored pair.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "citation_verdicts",
        sa.Column("id", _ID, nullable=False),
        sa.Column("answer_id", _ID, nullable=False),
        sa.Column("question_id", _ID, nullable=False),
        sa.Column("claim_index", sa.Integer(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("chunk_index", sa.Integer(), nullable=True),
        sa.Column("verdict", sa.String(length=20), nullable=False),
        sa.Column("quote", sa.Text(), nullable=True),
        sa.Column("retrieval_status", sa.String(length=50), nullable=True),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("call_id", _ID, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["answer_id"],
            ["answers.id"],
            name=op.f("fk_citation_verdicts_answer_id_answers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["question_id"],
            ["questions.id"],
            name=op.f("fk_citation_verdicts_question_id_questions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["call_id"],
            ["calls.id"],
            name=op.f("fk_citation_verdicts_call_id_calls"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_citation_verdicts")),
        sa.UniqueConstraint(
            "answer_id",
            "claim_index",
            "target",
            "model",
            name=op.f("uq_citation_verdicts_answer_id"),
        ),
    )
    op.create_index(
        "ix_citation_verdicts_question_id", "citation_verdicts", ["question_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_citation_verdicts_question_id", table_name="citation_verdicts")
    op.drop_table("citation_verdicts")
