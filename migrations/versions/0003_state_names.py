"""The state ``grounded`` becomes ``awaiting_structure``.

``grounded`` meant "call 1's answer is stored, call 2 is still to come", and read as if it
said something about grounding, which ``answers.grounded`` does. The rows move across; no
column changes.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE questions SET state = 'awaiting_structure' WHERE state = 'grounded'")


def downgrade() -> None:
    op.execute("UPDATE questions SET state = 'grounded' WHERE state = 'awaiting_structure'")
