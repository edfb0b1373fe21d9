"""The desk on hostile input: a source's domain from where it leads, and a bounded search index.

* ``sources.destination_domain``: the registrable domain of the source's resolved destination
  (as the ``[sources]`` policy reads it: ``news.bbc.co.uk`` -> ``bbc.co.uk``), written with
  the destination. The Developer API sends no ``domain`` for a web source, so the desk's
  domain column and filter read this one where ``domain`` is empty. Backfilled here from the
  stored destinations.
* PostgreSQL: ``desk_tsv_of`` indexes the first 100,000 characters of a question's text and of
  its answer's (a ``tsvector`` holds at most 1 MB, and a longer text failed the whole load
  with "string is too long for tsvector"). SQLite's FTS5 has no such bound.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pipeline.grounding.policy import registrable_domain

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

DESK_INDEX_CHARS = 100_000  # pipeline.store.reviews.DESK_INDEX_CHARS
BACKFILL_BATCH = 2_000

_BOUNDED_TSV = f"""CREATE OR REPLACE FUNCTION desk_tsv_of(question text, answer text)
    RETURNS tsvector LANGUAGE sql IMMUTABLE AS $$
    SELECT setweight(to_tsvector('simple', left(coalesce(question, ''), {DESK_INDEX_CHARS})), 'A')
        || setweight(to_tsvector('simple', left(coalesce(answer, ''), {DESK_INDEX_CHARS})), 'B')
    $$"""
_WHOLE_TSV = """CREATE OR REPLACE FUNCTION desk_tsv_of(question text, answer text)
    RETURNS tsvector LANGUAGE sql IMMUTABLE AS $$
    SELECT setweight(to_tsvector('simple', coalesce(question, '')), 'A')
        || setweight(to_tsvector('simple', coalesce(answer, '')), 'B') $$"""

_sources = sa.table(
    "sources",
    sa.column("id", sa.BigInteger),
    sa.column("destination", sa.Text),
    sa.column("destination_domain", sa.Text),
)


def _backfill(bind: sa.Connection) -> None:
    after = 0
    while True:
        rows = bind.execute(
            sa.select(_sources.c.id, _sources.c.destination)
            .where(_sources.c.destination.is_not(None), _sources.c.id > after)
            .order_by(_sources.c.id)
            .limit(BACKFILL_BATCH)
        ).all()
        if not rows:
            return
        found = [
            {"b_id": row.id, "b_domain": domain}
            for row in rows
            if (domain := registrable_domain(row.destination))
        ]
        if found:
            bind.execute(
                _sources.update()
                .where(_sources.c.id == sa.bindparam("b_id"))
                .values(destination_domain=sa.bindparam("b_domain")),
                found,
            )
        after = rows[-1].id


def upgrade() -> None:
    with op.batch_alter_table("sources", recreate="never") as batch:
        batch.add_column(sa.Column("destination_domain", sa.Text(), nullable=True))
    bind = op.get_bind()
    _backfill(bind)
    if bind.dialect.name == "postgresql":
        op.execute(_BOUNDED_TSV)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_WHOLE_TSV)
    with op.batch_alter_table("sources", recreate="never") as batch:
        batch.drop_column("destination_domain")
