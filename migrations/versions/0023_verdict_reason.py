"""Why a judge's verdict was not taken, or was flagged.

* ``citation_verdicts.reason``: null for a verdict taken as the judge gave it; otherwise why
  it became ``no_verdict`` (a quote too short, not in the passage, missing the claim's key
  terms; a value that cannot be stored: a NUL, an unknown retrieval status; an answer that
  could not be read), or, for a URL source's verdict kept, the flag on its quote.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("citation_verdicts", recreate="never") as batch:
        batch.add_column(sa.Column("reason", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("citation_verdicts", recreate="never") as batch:
        batch.drop_column("reason")
