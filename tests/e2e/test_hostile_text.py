"""A job full of hostile text (ids, questions, classes, answers, queries, titles, citations that
start like spreadsheet formulas or carry HTML and script links), read back by the outputs a
person opens: the CSV exports run no formula, the Markdown of ``show`` and ``cite`` makes no
HTML element from it."""

from __future__ import annotations

import csv
import json
from html.parser import HTMLParser
from pathlib import Path

import anyio
import orjson
import pytest
import sqlalchemy as sa
from markdown_it import MarkdownIt

from pipeline.cli import main
from pipeline.commands.run import run_command
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec, load_jobspec
from pipeline.results.export.writers import FORMULA_LEADS
from pipeline.store.engine import create_engine
from pipeline.store.tables import answers, sources, supports
from tests.support.jobs import make_job

FORMULAS = ["=1+1", "+SUM(A1)", "-2+3", "@SUM(A1)", "\t=x", "\r=x"]
# Ids are stripped of surrounding whitespace when loaded: those two lead with a letter.
IDS = [f"{lead}id{i}" for i, lead in enumerate(FORMULAS[:4])] + ["id4", "id5"]
HOSTILE_ANSWER = (
    ' =HYPERLINK("http://evil.example","x") <script>alert(1)</script>'
    " <img src=x onerror=alert(2)> [click](javascript:alert(3)) ![p](data:image/png;base64,x)"
    " <vbscript:msgbox(4)> [1]: javascript:alert(5)"
)
HOSTILE_QUERY = "=cmd|' /C calc'!A0"
HOSTILE_TITLE = '@SUM(1)<img src=x onerror="alert(6)">'
HOSTILE_CITATION = "-2+3 <b onmouseover=alert(7)>"
# Elements Markdown formatting and the markers make; anything else came from the text.
FORMATTING_TAGS = frozenset(
    {"p", "a", "em", "strong", "code", "pre", "ul", "ol", "li", "h1", "h2", "h3", "blockquote"}
)


async def plant(spec: JobSpec) -> None:
    """Append hostile text to every stored answer (and its raw response, which ``cite``
    reads), and make every query, title and citation text hostile."""
    engine = create_engine(spec.database_url)
    try:
        async with engine.begin() as connection:
            stored = await connection.execute(sa.select(answers.c.id, answers.c.raw_response))
            for answer_id, raw in stored.all():
                body = orjson.loads(raw)
                candidate = body["candidates"][0]
                text_parts = [p for p in candidate["content"]["parts"] if "text" in p]
                text_parts[-1]["text"] += HOSTILE_ANSWER  # appended: the offsets stay valid
                metadata = candidate.setdefault("groundingMetadata", {})
                metadata["webSearchQueries"] = [HOSTILE_QUERY]
                for chunk in metadata.get("groundingChunks", []):
                    chunk.setdefault("web", {})["title"] = HOSTILE_TITLE
                await connection.execute(
                    answers.update()
                    .where(answers.c.id == answer_id)
                    .values(
                        text=answers.c.text + HOSTILE_ANSWER,
                        web_search_queries=[HOSTILE_QUERY],
                        raw_response=orjson.dumps(body).decode(),
                    )
                )
            await connection.execute(sources.update().values(title=HOSTILE_TITLE))
            await connection.execute(supports.update().values(text=HOSTILE_CITATION))
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> JobSpec:
    directory = tmp_path_factory.mktemp("hostile")
    with pytest.MonkeyPatch.context() as patch, running_emulator() as emu:
        patch.setenv("GEMINI_API_KEY", emu.api_key)
        make_job(directory, base_url=emu.base_url, n_questions=len(IDS))
        lines = [
            {"id": qid, "question": f"{lead}question {i}?", "topic": f"{lead}class"}
            for i, (qid, lead) in enumerate(zip(IDS, FORMULAS, strict=True))
        ]
        (directory / "questions.jsonl").write_bytes(
            b"".join(orjson.dumps(line) + b"\n" for line in lines)
        )
        spec = load_jobspec(directory / "job.toml", ["source.class_field=topic"])
        assert anyio.run(run_command, spec) == 0
    anyio.run(plant, spec)
    return spec


def csv_cells(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return [cell for row in rows[1:] for cell in row]


@pytest.mark.parametrize("long", [None, "sources", "citations"])
def test_no_exported_cell_starts_with_a_formula_character(
    job: JobSpec, tmp_path: Path, long: str | None
) -> None:
    out = tmp_path / "out.csv"
    args = ["export", str(job.path), "--format", "csv", "--out", str(out)]
    assert main(args + (["--long", long] if long else [])) == 0
    cells = csv_cells(out)
    assert cells
    assert [c for c in cells if c.startswith(FORMULA_LEADS)] == []
    assert "'" + IDS[0] in cells  # the text is kept, marked as text
    if long is None:
        assert any(c.startswith("'=HYPERLINK") or "=HYPERLINK" in c for c in cells)
    # --csv-raw writes them as stored, for a program that reads the CSV itself.
    assert main([*args, "--csv-raw"] + (["--long", long] if long else [])) == 0
    assert IDS[0] in csv_cells(out)


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag


def rendered_elements(markdown: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Elements()
    parser.feed(MarkdownIt("commonmark").render(markdown))  # raw HTML on, as most renderers
    parser.close()
    return parser.tags


def assert_no_element_from_model_text(markdown: str) -> None:
    for tag, attrs in rendered_elements(markdown):
        assert tag in FORMATTING_TAGS, (tag, attrs)
        assert not any(name.startswith("on") or name in ("src", "style") for name in attrs)
        if tag == "a":
            href = attrs.get("href") or ""
            assert href.startswith(("http://127.0.0.1", "https://")), href
            assert "evil" not in href


def test_show_and_cite_markdown_render_no_element_from_model_text(
    job: JobSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    answered = 0
    for qid in IDS:
        # "--" ends the options: an id may start with "-".
        assert main(["show", str(job.path), "--format", "json", "--", qid]) == 0
        record = json.loads(capsys.readouterr().out)
        assert main(["show", str(job.path), "--", qid]) == 0
        shown = capsys.readouterr().out
        assert_no_element_from_model_text(shown)
        if record["answer"] is None:
            continue
        assert "alert(1)" in shown  # the hostile text is there, as text
        # Its links lost their destinations (a would-be definition stays inert text).
        assert "(javascript:alert(3))" not in shown and "vbscript:" not in shown
        assert main(["cite", "--job", str(job.path), f"--id={qid}", "--format", "markdown"]) == 0
        cited = capsys.readouterr().out
        assert_no_element_from_model_text(cited)
        assert "alert(1)" in cited and "(javascript:alert(3))" not in cited
        answered += 1
    assert answered == len(IDS)
