"""The measured citation precision where results are read: ``ground status --json``,
``ground export --verified``, the report and the metrics textfile agree with what
``ground verify`` measured, all read from the stored verdicts."""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import pytest

from pipeline.cli import main
from pipeline.commands.run import run_command
from pipeline.commands.verify import verify_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import load_jobspec
from tests.e2e.test_verify import _CLASSES, _measured, _sets, _with_classes
from tests.support.jobs import make_job

pytestmark = [pytest.mark.usefixtures("emulator_key"), pytest.mark.timeout(300)]

_SETTINGS = [*_CLASSES, "verify.enabled=true"]


async def _ground(*argv: str) -> int:
    """The CLI, on a thread of its own (it runs its own event loop)."""
    return await anyio.to_thread.run_sync(main, [*argv, *_sets(_SETTINGS)])


def _jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.mark.anyio
async def test_status_export_and_report_show_the_measured_precision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = EmulatorConfig(
        seed=5, ungrounded_share=0.0, unsupported_share=0.2, unreadable_share=0.05
    )
    with running_emulator(config) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=40)
        _with_classes(tmp_path / "questions.jsonl")
        spec = load_jobspec(tmp_path / "job.toml", _SETTINGS)
        assert await run_command(spec) == 0
        capsys.readouterr()
        textfile = tmp_path / "verify.prom"
        assert await verify_command(spec, metrics_textfile=str(textfile)) == 0
        said = capsys.readouterr().out
        measured, low, high = _measured(said)
    job = str(spec.path)
    verified_line = next(x for x in said.splitlines() if x.startswith("verified answers: "))
    verified_of = verified_line.split(": ", 1)[1].split(" checked", 1)[0]

    assert await _ground("status", job, "--json") == 0
    document = orjson.loads(capsys.readouterr().out)
    figures = document["citation_precision"]
    shown = figures["job"]
    assert round(shown["precision"], 3) == measured
    assert (round(shown["ci95_low"], 3), round(shown["ci95_high"], 3)) == (low, high)
    assert set(figures["by_class"]) == {"even", "odd"}
    assert sum(c["readable"] for c in figures["by_class"].values()) == shown["readable"]

    everything, verified = tmp_path / "all.jsonl", tmp_path / "verified.jsonl"
    assert await _ground("export", job, "--out", str(everything)) == 0
    assert await _ground("export", job, "--verified", "--out", str(verified)) == 0
    records, kept = _jsonl(everything), _jsonl(verified)
    pairs = [v for r in records for v in r["citation_verdicts"]]
    readable = [v for v in pairs if v["verdict"] not in ("unreadable", "no_verdict")]
    supported = [v for v in readable if v["verdict"] == "supported"]
    assert (len(supported), len(readable), len(pairs)) == (
        shown["supported"],
        shown["readable"],
        shown["checked"],
    )
    assert 0 < len(kept) < len(records)
    assert len(kept) == shown["answers_verified"]
    # ground verify's count is the same figure, by the same definition.
    assert verified_of == f"{shown['answers_verified']} of {shown['answers_checked']}"
    assert {r["id"] for r in kept} == {r["id"] for r in records if r["verified"] is True}
    for r in kept:
        checked = [v["verdict"] for v in r["citation_verdicts"]]
        assert "supported" in checked and r["verified_fraction"] == 1.0
        assert not {"partly", "not_supported", "contradicted"} & set(checked)

    report = tmp_path / "report.html"
    assert await _ground("report", job, "--out", str(report)) == 0
    page = report.read_text(encoding="utf-8")
    assert 'id="citation-precision"' in page
    assert f"<b>{shown['precision']:.1%}</b>job" in page
    assert 'class="verdict-supported"' in page and 'class="verdict-not_supported"' in page

    prom = textfile.read_text()
    assert (
        f'ground_citation_precision{{class="(job)",ground_job="test"}} {shown["precision"]}' in prom
    )
