"""The schema revisions every command checks against, read without importing alembic, are
the ones alembic itself finds in the migration scripts."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from pipeline.store.engine import _revisions, alembic_config, head_revision


def test_the_revisions_read_from_the_scripts_are_alembics() -> None:
    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    head, known = _revisions()
    assert head == scripts.get_current_head() == head_revision()
    assert known == {r.revision for r in scripts.walk_revisions()}
