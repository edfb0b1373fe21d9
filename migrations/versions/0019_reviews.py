"""The review desk: people's decisions on answers (``ground serve``), and its full-text index.

* ``reviews``: one row per decision, never updated or deleted (the audit trail): the
  question, the answer and its version judged, the verdict (approved, rejected, needs_edit),
  the reviewer, the note and when. A question's review status is its newest decision on its
  latest answer version; a newer answer version makes it pending again.
* Full text over each question's text and its latest answer's text, for the desk's search:
  on SQLite an FTS5 table ``desk_fts`` (rowid = the question's id) kept in step by triggers on
  ``questions`` and ``answers``; on PostgreSQL ``questions.desk_tsv``, a ``tsvector`` the
  same triggers' counterpart keeps, with a GIN index.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

_SQLITE_FTS = [
    "CREATE VIRTUAL TABLE desk_fts USING fts5(question, answer, tokenize='unicode61')",
    "INSERT INTO desk_fts(rowid, question, answer) SELECT q.id, q.text, coalesce(("
    " SELECT a.text FROM answers a WHERE a.question_id = q.id AND a.superseded_at IS NULL"
    " ORDER BY a.version DESC LIMIT 1), '') FROM questions q",
    """CREATE TRIGGER desk_fts_question_insert AFTER INSERT ON questions BEGIN
        INSERT INTO desk_fts(rowid, question, answer) VALUES (new.id, new.text, '');
    END""",
    """CREATE TRIGGER desk_fts_question_text AFTER UPDATE OF text ON questions BEGIN
        UPDATE desk_fts SET question = new.text WHERE rowid = new.id;
    END""",
    """CREATE TRIGGER desk_fts_question_delete AFTER DELETE ON questions BEGIN
        DELETE FROM desk_fts WHERE rowid = old.id;
    END""",
    """CREATE TRIGGER desk_fts_answer_insert AFTER INSERT ON answers BEGIN
        UPDATE desk_fts SET answer = new.text WHERE rowid = new.question_id;
    END""",
    """CREATE TRIGGER desk_fts_answer_text AFTER UPDATE OF text ON answers
        WHEN new.superseded_at IS NULL BEGIN
        UPDATE desk_fts SET answer = new.text WHERE rowid = new.question_id;
    END""",
]

_POSTGRES_FTS = [
    "ALTER TABLE questions ADD COLUMN desk_tsv tsvector",
    """CREATE FUNCTION desk_tsv_of(question text, answer text) RETURNS tsvector
        LANGUAGE sql IMMUTABLE AS $$
        SELECT setweight(to_tsvector('simple', coalesce(question, '')), 'A')
            || setweight(to_tsvector('simple', coalesce(answer, '')), 'B') $$""",
    """CREATE FUNCTION desk_tsv_question() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.desk_tsv := desk_tsv_of(NEW.text, (SELECT a.text FROM answers a
                WHERE a.question_id = NEW.id AND a.superseded_at IS NULL
                ORDER BY a.version DESC LIMIT 1));
            RETURN NEW;
        END $$""",
    """CREATE TRIGGER desk_tsv_question BEFORE INSERT OR UPDATE OF text ON questions
        FOR EACH ROW EXECUTE FUNCTION desk_tsv_question()""",
    """CREATE FUNCTION desk_tsv_answer() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.superseded_at IS NULL THEN
                UPDATE questions SET desk_tsv = desk_tsv_of(questions.text, NEW.text)
                WHERE questions.id = NEW.question_id;
            END IF;
            RETURN NEW;
        END $$""",
    """CREATE TRIGGER desk_tsv_answer AFTER INSERT OR UPDATE OF text ON answers
        FOR EACH ROW EXECUTE FUNCTION desk_tsv_answer()""",
    "UPDATE questions SET desk_tsv = desk_tsv_of(questions.text, (SELECT a.text FROM answers a"
    " WHERE a.question_id = questions.id AND a.superseded_at IS NULL"
    " ORDER BY a.version DESC LIMIT 1))",
    "CREATE INDEX ix_questions_desk_tsv ON questions USING GIN (desk_tsv)",
]


def upgrade() -> None:
    op.create_table(
        "reviews",
        sa.Column("id", _ID, nullable=False),
        sa.Column("question_id", _ID, nullable=False),
        sa.Column("answer_id", _ID, nullable=True),
        sa.Column("answer_version", sa.Integer(), nullable=True),
        sa.Column("verdict", sa.String(length=20), nullable=False),
        sa.Column("reviewer", sa.String(length=200), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["question_id"],
            ["questions.id"],
            name=op.f("fk_reviews_question_id_questions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["answer_id"],
            ["answers.id"],
            name=op.f("fk_reviews_answer_id_answers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reviews")),
    )
    op.create_index("ix_reviews_question_id", "reviews", ["question_id", "id"], unique=False)
    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_FTS if dialect == "sqlite" else _POSTGRES_FTS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in (
            "desk_fts_answer_text",
            "desk_fts_answer_insert",
            "desk_fts_question_delete",
            "desk_fts_question_text",
            "desk_fts_question_insert",
        ):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS desk_fts")
    else:
        op.execute("DROP INDEX IF EXISTS ix_questions_desk_tsv")
        op.execute("DROP TRIGGER IF EXISTS desk_tsv_answer ON answers")
        op.execute("DROP TRIGGER IF EXISTS desk_tsv_question ON questions")
        op.execute("DROP FUNCTION IF EXISTS desk_tsv_answer()")
        op.execute("DROP FUNCTION IF EXISTS desk_tsv_question()")
        op.execute("DROP FUNCTION IF EXISTS desk_tsv_of(text, text)")
        op.execute("ALTER TABLE questions DROP COLUMN IF EXISTS desk_tsv")
    op.drop_index("ix_reviews_question_id", table_name="reviews")
    op.drop_table("reviews")
