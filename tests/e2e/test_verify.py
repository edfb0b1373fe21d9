"""``ground verify`` end to end: the emulator reads its own pages, and the measured citation
precision is compared with the truth it records."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.cli import main
from pipeline.commands.run import run_command
from pipeline.commands.verify import verify_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.corpus import SOURCES
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.wire import decode_response
from pipeline.job.spec import load_jobspec
from pipeline.rows import StoredSource, StoredSupport
from pipeline.store.tables import calls, citation_verdicts
from pipeline.verify.claims import claims_of
from pipeline.verify.parsing import read_verdicts
from pipeline.verify.requests import verification_calls
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = [pytest.mark.usefixtures("emulator_key"), pytest.mark.timeout(600)]

_PRECISION = "  job: precision "


def _measured(out: str) -> tuple[float, float, float]:
    """(precision, low, high) of the job's line."""
    line = next(x for x in out.splitlines() if x.startswith(_PRECISION))
    value = float(line[len(_PRECISION) :].split()[0])
    low, high = line.split("[95% CI ", 1)[1].split("]", 1)[0].split("-")
    return value, float(low), float(high)


_CLASSES = ['source.class_field="cls"']


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def _with_classes(path: Path) -> None:
    """Give the questions two classes, alternating."""
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    path.write_bytes(
        b"".join(
            orjson.dumps({**row, "cls": "even" if n % 2 == 0 else "odd"}) + b"\n"
            for n, row in enumerate(rows)
        )
    )


def _truth(stats: dict) -> float:
    v = stats["verification"]
    readable = v.get("supported", 0) + v.get("not_supported", 0) + v.get("contradicted", 0)
    return v.get("supported", 0) / readable


@pytest.mark.anyio
async def test_verify_measures_the_emulators_truth_and_gates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = EmulatorConfig(
        seed=11, ungrounded_share=0.0, unsupported_share=0.2, unreadable_share=0.05
    )
    with running_emulator(config) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=400)
        _with_classes(tmp_path / "questions.jsonl")
        spec = load_jobspec(tmp_path / "job.toml", [*_CLASSES, "verify.enabled=true"])
        assert await run_command(spec) == 0
        capsys.readouterr()
        assert await verify_command(spec) == 0
        out = capsys.readouterr().out
        stats = emu.stats()
        truth = _truth(stats)
        measured, low, high = _measured(out)
        assert abs(measured - truth) <= 0.03
        assert abs(truth - 0.8) <= 0.1
        v = stats["verification"]
        assert f"unreadable {v['unreadable']}," in out  # pages it could not read: not counted
        assert (
            v["requests"] > 0 and v.get("redirect_links", 0) == 0 and v.get("foreign_urls", 0) == 0
        )

        # A rerun pays for nothing: every sampled answer is checked already.
        assert await verify_command(spec) == 0
        assert emu.stats()["verification"]["requests"] == v["requests"]

        # A share of 0.1 (a fresh model id, so nothing is reused): its interval holds the truth.
        sampled = load_jobspec(
            spec.path,
            [
                *_CLASSES,
                "verify.enabled=true",
                "verify.sample=0.1",
                "verify.seed=3",
                'verify.model="gemini-3.5-flash-lite"',
            ],
        )
        capsys.readouterr()
        assert await verify_command(sampled) == 0
        sample_out = capsys.readouterr().out
        _, low, high = _measured(sample_out)
        assert low <= truth <= high

        gated = load_jobspec(spec.path, [*_CLASSES, "verify.enabled=true", "verify.fail_below=0.9"])
        assert await verify_command(gated) == 3
        err = capsys.readouterr().err
        assert "fail_below = 0.9" in err and "in class even, odd" in err

    rows = await fetch_rows(spec.database_url, sa.select(citation_verdicts))
    assert rows and all(r.call_id is not None for r in rows)
    assert not any("grounding-api-redirect" in (r.url or "") for r in rows)
    steps = await fetch_rows(
        spec.database_url, sa.select(calls.c.step).where(calls.c.step == "verify")
    )
    assert len(steps) >= v["requests"]


def test_cli_verify_needs_the_section_enabled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_job(tmp_path, base_url="http://127.0.0.1:9")
    assert main(["verify", str(spec.path)]) == 2
    assert "[verify] is not enabled" in capsys.readouterr().err
    assert (
        main(["verify", str(spec.path), *_sets(["verify.enabled=true", 'verify.sample="x"'])]) == 2
    )
    assert "verify.sample" in capsys.readouterr().err


def _post(base_url: str, key: str, model: str, body: bytes) -> dict:
    request = urllib.request.Request(
        f"{base_url}/v1beta/models/{model}:generateContent",
        data=body,
        headers={"Content-Type": "application/json", "x-goog-api-key": key},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return orjson.loads(response.read())


def test_emulator_answers_json_on_gemini_3_with_url_context_metadata() -> None:
    page = SOURCES[0].url
    sources = [
        StoredSource(0, "web", page, "resolved"),
        StoredSource(1, "web", "https://elsewhere.example/", "resolved"),
    ]
    claim = "A claim the emulator judges."
    answer = claims_of(1, 1, "c", [StoredSupport(0, claim, (0, 1))], sources)
    (call,) = verification_calls(answer, "gemini-3-flash-preview")
    with running_emulator(EmulatorConfig(seed=2)) as emu:
        raw = _post(emu.base_url, emu.api_key, "gemini-3-flash-preview", call.body)
        truth = emu.stats()["verification"]
    statuses = raw["candidates"][0]["urlContextMetadata"]["urlMetadata"]
    assert {s["retrievedUrl"]: s["urlRetrievalStatus"] for s in statuses} == {
        page: "URL_RETRIEVAL_STATUS_SUCCESS",
        "https://elsewhere.example/": "URL_RETRIEVAL_STATUS_ERROR",  # not one of its pages
    }
    assert orjson.loads(raw["candidates"][0]["content"]["parts"][0]["text"])["verdicts"]
    ours, foreign = read_verdicts(call, decode_response(orjson.dumps(raw)))
    assert ours.verdict == "supported" and foreign.verdict == "unreadable"
    assert truth["foreign_urls"] == 1 and truth["supported"] == 1
