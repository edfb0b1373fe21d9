"""The spill file: what is kept comes back whole; a torn last line is left out; the state
directory is checked before a run."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest

from pipeline.job.states import QuestionState
from pipeline.rows import AnswerRecord, CallRecord, StateChange
from pipeline.run.spill import (
    SpillError,
    SpillFile,
    claim_spill_files,
    ensure_writable,
    read_spilled,
    spill_files,
    spill_path,
    spill_prefix,
    state_directory,
)
from pipeline.run.verdicts import Outcome, stored_answer

RAW = (
    b'{"candidates":[{"content":{"parts":[{"text":"Paris is the capital."}],"role":"model"},'
    b'"finishReason":"STOP","groundingMetadata":{"webSearchQueries":["capital of France"],'
    b'"groundingChunks":[{"web":{"uri":"https://example.com/r/1","title":"example.com"}}],'
    b'"groundingSupports":[{"segment":{"startIndex":0,"endIndex":5,"text":"Paris"},'
    b'"groundingChunkIndices":[0]}]}}],"usageMetadata":{"promptTokenCount":5,'
    b'"candidatesTokenCount":6,"totalTokenCount":11}}'
)


def _outcome(question_id: int) -> Outcome:
    from pipeline.gemini.wire import decode_response

    answer = AnswerRecord(
        question_id=question_id,
        answer=stored_answer(RAW),
        response=decode_response(RAW),
        finish_reason="STOP",
        raw_response=RAW,
        latency_ms=12.5,
    )
    call = CallRecord(
        question_id=question_id,
        step="ground",
        model="gemini-2.5-flash",
        started_at=dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        latency_ms=12.5,
        http_status=200,
        outcome="ok",
        input_tokens=5,
        output_tokens=6,
        cost_micro_usd=35_000,
        reserved_micro=90_000,
    )
    return Outcome(StateChange(question_id, QuestionState.DONE, 1), answer, None, [call])


def test_kept_outcomes_come_back_whole(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "state" / "job.spill.jsonl")
    first, second = _outcome(1), _outcome(2)
    spill.keep([first], {1: "q-one"}.get)
    spill.keep([second, Outcome(None)], {2: "q-two"}.get)  # nothing paid, nothing kept
    assert (spill.kept, spill.kept_cost_micro) == (2, 70_000)
    back = read_spilled(spill.path)
    assert [k.qid for k in back] == ["q-one", "q-two"]
    assert back[0].change == first.change
    assert back[0].answer == first.answer  # the raw paid response and its parsed answer
    assert back[0].calls == first.calls  # tokens and cost for the ledger and the spend


def test_an_outcome_the_file_could_not_take_is_not_counted_as_kept(tmp_path: Path) -> None:
    (tmp_path / "state").write_bytes(b"")  # a file where the state directory should be
    spill = SpillFile(tmp_path / "state" / "job.spill.jsonl")
    with pytest.raises(SpillError, match="cannot be written"):
        spill.keep([_outcome(1)], lambda _id: "q1")
    assert (spill.kept, spill.kept_cost_micro) == (0, 0)


def test_a_torn_last_line_is_left_out_and_a_torn_middle_is_refused(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "job.spill.jsonl")
    spill.keep([_outcome(1)], lambda _id: "q1")
    whole = spill.path.read_bytes()
    spill.path.write_bytes(whole + whole[:40])
    assert [k.qid for k in read_spilled(spill.path)] == ["q1"]
    spill.path.write_bytes(whole[:40] + b"\n" + whole)
    with pytest.raises(SpillError, match="line 1"):
        read_spilled(spill.path)


def test_the_state_directory_follows_xdg_and_the_job_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_directory("", tmp_path / "jobs") == tmp_path / "xdg" / "ground"
    assert state_directory("spills", tmp_path / "jobs") == tmp_path / "jobs" / "spills"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert state_directory("", tmp_path) == Path.home() / ".local" / "state" / "ground"
    one = spill_path(spill_prefix(tmp_path, "my job/1", "/data/a.sqlite"))
    assert one.name.startswith("my_job_1-")
    assert one.name.endswith(f".{os.getpid()}.spill.jsonl")
    assert one != spill_path(spill_prefix(tmp_path, "my job/1", "/data/b.sqlite"))


def test_a_run_stores_its_own_and_dead_processes_files_never_a_live_ones(tmp_path: Path) -> None:
    prefix = spill_prefix(tmp_path, "job", "/data/a.sqlite")
    dead = subprocess.Popen(["true"])
    dead.wait()
    for pid in (os.getpid(), dead.pid, 1):  # 1: always alive, maybe still writing its own
        spill_path(prefix, pid).write_bytes(b"")
    assert spill_files(prefix) == sorted([spill_path(prefix), spill_path(prefix, dead.pid)])
    claimed = claim_spill_files(prefix)  # the dead one's made ours: no other run takes it
    assert len(claimed) == 2
    assert spill_path(prefix) in claimed
    assert not spill_path(prefix, dead.pid).exists()
    assert spill_path(prefix, 1).exists()
    assert sorted(spill_files(prefix)) == sorted(claimed)


def test_an_unwritable_state_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SpillError, match=r"^\[job\] state_dir .*/file/ground: cannot write"):
        ensure_writable(blocker / "ground")
