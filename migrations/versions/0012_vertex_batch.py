"""Vertex batch prediction: where each batch's files live in Cloud Storage.

A Vertex batch (``batches.name`` = ``projects/.../batchPredictionJobs/{id}``) reads its input
from an object and writes its output under a prefix, both chosen before the job is created, so
a run that dies at any step finds them again: ``input_uri`` (the uploaded JSONL),
``input_md5`` (its base64 MD5: an object found there with the same hash is not uploaded
again), ``output_uri_prefix`` (the job's ``outputUriPrefix``), ``output_dir`` (Vertex's
``outputInfo.gcsOutputDirectory``, once reported) and ``cleaned_at`` (when ``ground batch
clean`` removed what the batch left in the bucket). All null for Developer API batches.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("input_uri", sa.Text(), nullable=True))
        batch.add_column(sa.Column("input_md5", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("output_uri_prefix", sa.Text(), nullable=True))
        batch.add_column(sa.Column("output_dir", sa.Text(), nullable=True))
        batch.add_column(sa.Column("cleaned_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("cleaned_at")
        batch.drop_column("output_dir")
        batch.drop_column("output_uri_prefix")
        batch.drop_column("input_md5")
        batch.drop_column("input_uri")
