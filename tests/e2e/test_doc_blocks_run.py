"""The docs' blocks marked ``<!-- run-by: doc-blocks -->``, run as written against the
emulator (tests/support/doc_blocks.py says how blocks are marked).

They run in page order in one workspace laid out as a checkout after ``make demo``, in a
temporary directory: ``jobs/demo.toml`` (its first questions, pointed at the emulator) already
run, and the ``job.toml`` the guides name (the same questions, ``[verify]`` on) already run. A
shell block's ``ground`` lines run through ``ground``'s own entry point, each expected to exit
0, with only the base URL, the resolver's allowed host and the pace pointed at the emulator
(``--set``, after the line's own); ``export NAME=VALUE`` sets a variable (a ``...`` value is
left to the test's own key); a ``ground emulator`` line is stood in for by the test's
emulator; any other line fails the test, since it would not be run. A Python block runs in its
page's namespace, shared by the page's blocks in order, like a notebook's cells. Where the
page shows what a command prints, the output is checked against it."""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from standardwebhooks import Webhook

from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.notify.webhook import signed_headers
from tests.support.doc_blocks import DOC_BLOCKS_TEST, Block, blocks, parse_blocks, shell_lines
from tests.support.doc_checks import ground_lines
from tests.support.doc_reference import reference, sample_event_body
from tests.support.keys import TEST_API_KEY
from tests.support.paths import JOBS, REPO

N = 12  # the demo's first questions: enough for each class, quick at the emulator
PACE = "limits.requests_per_minute=6000"
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # a made-up signing secret
REVIEW_PAGE = "docs/guides/review-desk.md"
GETTING_STARTED = "docs/getting-started.md"

pytestmark = pytest.mark.timeout(180)

# What a block's comments say its commands print or write, as the output shows it: (page, a
# line of the block, what its output holds, the files it leaves).
SHOWN = [
    (
        GETTING_STARTED,
        "ground init first-job",
        [  # "first-job/job.toml, questions.jsonl, schema.json"; the dry run "sends nothing"
            "wrote first-job/job.toml",
            "wrote first-job/questions.jsonl",
            "wrote first-job/schema.json",
            "dry run: nothing is sent",
        ],
        ["first-job/job.toml", "first-job/questions.jsonl", "first-job/schema.json"],
    ),
    (
        "docs/guides/verified-answers.md",
        "ground verify job.toml",
        # "what the verification calls are expected to cost", "print the precision"
        ["verification expected: $", "citation precision", "verified answers: "],
        ["verified.jsonl"],
    ),
]


def _runnable() -> list[Block]:
    return [b for b in blocks() if b.marker == "run-by" and b.reason == DOC_BLOCKS_TEST]


def _job_toml(base_url: str, host: str) -> str:
    """The guides' ``job.toml``: the demo's first questions, Google Search, [verify] on."""
    return f"""[job]
name = "docs"
database = "sqlite:///var/docs.sqlite"

[source]
file = "jobs/demo_questions.jsonl"
class_field = "topic"

[model]
base_url = "{base_url}"

[limits]
requests_per_minute = 6000

[resolver]
allow_hosts = ["{host}"]

[verify]
enabled = true
"""


def _demo_toml(base_url: str, host: str) -> str:
    """jobs/demo.toml, pointed at the emulator in the file itself (the Python API reads it)."""
    text = (JOBS / "demo.toml").read_text(encoding="utf-8")
    text = re.sub(r'(?m)^base_url = ""$', f'base_url = "{base_url}"', text, count=1)
    return re.sub(r"(?m)^allow_hosts = .*$", f'allow_hosts = ["{host}"]', text, count=1)


def _lay_out(root: Path, emu: RunningEmulator) -> None:
    host = emu.base_url.split("://", 1)[1]
    (root / "jobs").mkdir()
    (root / "var").mkdir()
    for name in ("demo_schema.json", "demo_corpus.jsonl"):
        shutil.copy(JOBS / name, root / "jobs" / name)
    lines = (JOBS / "demo_questions.jsonl").read_text(encoding="utf-8").splitlines()[:N]
    (root / "jobs" / "demo_questions.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    (root / "jobs" / "demo.toml").write_text(_demo_toml(emu.base_url, host), "utf-8")
    (root / "job.toml").write_text(_job_toml(emu.base_url, host), "utf-8")
    ids = [json.loads(line)["id"] for line in lines]
    decisions = ["id,verdict,note", f"{ids[0]},approved,", f"{ids[1]},rejected,wrong city"]
    (root / "decisions.csv").write_text("\n".join([*decisions, f"{ids[2]},needs edit,"]) + "\n")
    frame = pd.DataFrame(
        {"id": ["new-1", "new-2"], "question": ["Q one?", "Q two?"], "topic": ["cities"] * 2}
    )
    frame.to_parquet(root / "questions.parquet")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, RunningEmulator]]:
    root = tmp_path_factory.mktemp("checkout")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMINI_API_KEY", TEST_API_KEY)
        patch.delenv("GOOGLE_API_KEY", raising=False)
        patch.chdir(root)
        with running_emulator(EmulatorConfig(seed=7)) as emu:
            _lay_out(root, emu)
            assert main(["run", "jobs/demo.toml"]) in (0, 3)
            assert main(["run", "job.toml"]) in (0, 3)
            yield root, emu


def _command(words: list[str]) -> str:
    """The longest ``ground`` command the words begin with."""
    for n in range(len(words), 1, -1):
        if (line := " ".join(words[:n])) in reference().commands:
            return line
    return "ground"


def _at_emulator(words: list[str], emu: RunningEmulator) -> list[str]:
    """``words`` with the base URL, the allowed host and the pace set, where the command
    takes ``--set`` (its parser says so)."""
    if "--set" not in reference().commands[_command(words)]:
        return words
    host = emu.base_url.split("://", 1)[1]
    return [
        *words,
        *("--set", f'model.base_url="{emu.base_url}"'),
        *("--set", f'resolver.allow_hosts=["{host}"]'),
        *("--set", PACE),
    ]


def _run_shell(block: Block, emu: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    for offset, line in shell_lines(block.body):
        number = block.line + 1 + offset
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "export":
            for assignment in words[1:]:
                name, _, value = assignment.partition("=")
                if value != "...":
                    monkeypatch.setenv(name, value)
            continue
        assert words[0] == "ground", f"{block.page}:{number}: only ground and export lines run"
        if words[1:2] == ["emulator"]:  # the test's own emulator stands in for it
            continue
        try:
            status = main(_at_emulator(words, emu)[1:])
        except SystemExit as exc:  # argparse refused the line
            status = exc.code
        assert status == 0, f"{block.page}:{number}: {line.strip()} exited {status}"


def _namespace(page: str, namespaces: dict[str, dict[str, object]]) -> dict[str, object]:
    """The page's namespace; the webhooks page's verification gets a body as the product
    signs it (``secret``, ``body``, ``headers``, as its text names them)."""
    if page not in namespaces:
        namespaces[page] = {}
        if page.endswith("webhooks.md"):
            body = json.dumps(sample_event_body()).encode()
            at = dt.datetime.now(dt.UTC)
            headers = signed_headers(Webhook(SECRET), "msg_docs", at, body)
            namespaces[page].update(secret=SECRET, body=body, headers=headers)
    return namespaces[page]


def _shown_status_line() -> re.Pattern[str]:
    """The review desk page's ``ground status`` line, its figures made wildcards."""
    text = (REPO / REVIEW_PAGE).read_text(encoding="utf-8")
    [shown] = [b.body for b in parse_blocks(text, REVIEW_PAGE) if b.lang == "text"]
    return re.compile(re.sub(r"\d+", r"\\d+", re.escape(shown.strip())))


def _check_init_says_the_next_commands(block: Block, out: str) -> None:
    """The page's next two commands are the ones ``ground init`` prints ("next:", "then:")."""
    said = [
        shlex.split(line.split(":", 1)[1], comments=True)
        for line in out.splitlines()
        if line.startswith(("next:", "then:"))
    ]
    shown = [words for _, words in ground_lines(block.body)][1:]
    assert said == shown


@pytest.fixture(scope="module")
def namespaces() -> dict[str, dict[str, object]]:
    return {}


@pytest.mark.parametrize("block", _runnable(), ids=lambda b: b.where)
def test_the_block_runs_as_written(
    block: Block,
    workspace: tuple[Path, RunningEmulator],
    namespaces: dict[str, dict[str, object]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, emu = workspace
    monkeypatch.chdir(root)
    monkeypatch.setenv("GEMINI_API_KEY", TEST_API_KEY)
    if block.lang == "sh":
        _run_shell(block, emu, monkeypatch)
    else:
        code = compile(block.body, f"{REPO / block.page}:{block.line}", "exec")
        exec(code, _namespace(block.page, namespaces))
    out = capsys.readouterr().out
    for page, line, printed, written in SHOWN:
        if page == block.page and line in block.body:
            assert [text for text in printed if text not in out] == [], out
            assert [name for name in written if not (root / name).stat().st_size] == []
    if block.page == GETTING_STARTED and "ground init" in block.body:
        _check_init_says_the_next_commands(block, out)
    if block.page == REVIEW_PAGE:  # the decisions are in: status shows them as the page does
        capsys.readouterr()
        assert main(["status", "job.toml"]) == 0
        assert _shown_status_line().search(capsys.readouterr().out)
    if block.page.endswith("webhooks.md"):
        assert _namespace(block.page, namespaces)["event"] == sample_event_body()


def test_the_marked_blocks_are_the_ones_meant() -> None:
    """Each page whose blocks this test runs, so an unmarked page is noticed."""
    assert {b.page for b in _runnable()} >= {
        "docs/getting-started.md",
        "docs/guides/exports-and-python-api.md",
        "docs/guides/review-desk.md",
        "docs/guides/verified-answers.md",
        "docs/guides/webhooks.md",
    }
