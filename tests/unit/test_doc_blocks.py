"""The docs name only what the code has, and every shell and Python block in them is run by
the suite or marked as illustrative with a reason (tests/support/doc_blocks.py)."""

from __future__ import annotations

import pytest

from tests.support.doc_blocks import DOC_BLOCKS_TEST, RUNNABLE, blocks, pages, parse_blocks
from tests.support.doc_checks import ground_lines, problems
from tests.support.doc_reference import reference
from tests.support.paths import REPO

MIN_BLOCKS = 30  # sh and python blocks in the docs: the parser still finds them


def test_every_shell_and_python_block_is_run_or_marked() -> None:
    runnable = [b for b in blocks() if b.lang in RUNNABLE]
    assert len(runnable) >= MIN_BLOCKS
    unmarked = [b.where for b in runnable if not b.marker or not b.reason]
    assert not unmarked, (
        "mark each with <!-- run-by: doc-blocks --> (tests/e2e/test_doc_blocks_run.py runs"
        " it), <!-- run-by: tests/... --> or <!-- illustrative: why -->:\n" + "\n".join(unmarked)
    )


def test_a_block_run_by_a_test_names_a_test_that_reads_its_page() -> None:
    wrong = []
    for block in blocks():
        if block.marker != "run-by" or block.reason == DOC_BLOCKS_TEST:
            continue
        test = REPO / block.reason
        stem = block.page.rsplit("/", 1)[-1].removesuffix(".md")
        if not (block.reason.startswith("tests/") and test.is_file()):
            wrong.append(f"{block.where}: no test {block.reason}")
        elif stem not in test.read_text(encoding="utf-8"):
            wrong.append(f"{block.where}: {block.reason} never names {stem}")
    assert not wrong, "\n".join(wrong)


def test_the_pages_name_only_commands_flags_keys_events_and_statuses_that_exist() -> None:
    found = []
    for path in pages():
        page = path.relative_to(REPO).as_posix()
        found += problems(path.read_text(encoding="utf-8"), page, reference())
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("```sh\nground export job.toml --format jsonl -o out.jsonl\n```\n", "no flag `-o`"),
        ("Try `ground frobnicate job.toml`.", "no command `ground frobnicate job.toml`"),
        (
            "```sh\nground run j.toml \\\n  --set limits.rpm=5\n```\n",
            "no job-file key `limits.rpm`",
        ),
        ("Set `[resolver] allow_host` to it.", "no job-file key `[resolver] allow_host`"),
        ("```toml\n[limits]\nrpm = 300\n```\n", "no job-file key `[limits] rpm`"),
        ("The `run.done` event is sent.", "no webhook event `run.done`"),
        ("| `run.finished` | at the end | `job`, `verdict` |\n", "no field `verdict`"),
        ("Then it exits `4`.", "no exit status 4"),
    ],
)
def test_a_name_the_code_does_not_have_is_found(text: str, problem: str) -> None:
    found = problems(text, "page.md", reference())
    assert len(found) == 1 and problem in found[0], found


def test_real_names_pass() -> None:
    text = (
        "```sh\nground export job.toml --format jsonl --out out.jsonl  # the file\n"
        "ground batch cancel job.toml\nground show JOB -- -12\n```\n"
        "`ground run JOB --set limits.requests_per_minute=300` exits `3` or exit status 2;"
        " `[resolver] allow_hosts`; the `run.finished` event; `--summary-json`'s `run.batch`.\n"
    )
    assert problems(text, "page.md", reference()) == []


def test_markers_are_read_from_just_above_the_fence() -> None:
    text = (
        "<!-- illustrative: needs a cluster -->\n\n```python\nx = 1\n```\n\n"
        "  <!-- run-by: doc-blocks -->\n  ```sh\n  ground status j.toml\n  ```\n\n"
        "```sh\nground load j.toml\n```\n"
    )
    marked = [(b.lang, b.marker, b.reason, b.body) for b in parse_blocks(text, "p.md")]
    assert marked == [
        ("python", "illustrative", "needs a cluster", "x = 1\n"),
        ("sh", "run-by", "doc-blocks", "ground status j.toml\n"),
        ("sh", "", "", "ground load j.toml\n"),
    ]


def test_getting_started_lists_every_command() -> None:
    """ "Every command at a glance" names each command the parser has (a group, such as
    ``ground batch``, by its own commands)."""
    page = "docs/getting-started.md"
    text = (REPO / page).read_text(encoding="utf-8")
    section = text.split("## Every command at a glance", 1)[1].split("\n## ", 1)[0]
    [listed] = [b.body for b in parse_blocks(section, page) if b.lang == "sh"]
    named = {" ".join(words[:n]) for _, words in ground_lines(listed) for n in (2, 3)}
    commands = set(reference().commands) - {"ground"}
    groups = {line.rsplit(" ", 1)[0] for line in commands if line.count(" ") == 2}
    assert sorted(commands - groups - named) == []


def test_the_readme_links_every_guide() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    documentation = text.split("\n## Documentation\n", 1)[1]
    guides = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs" / "guides").glob("*.md"))
    assert [g for g in guides if f"]({g})" not in documentation] == []
