"""Crash safety of own retrieval: SIGKILL a run again and again while it makes fallback calls
(straight to own retrieval, and after a managed answer that missed), then finish; nothing is
paid for twice and no index row is duplicated. With ``[retrieval] dense``, the questions'
embedding calls too: each question's text is paid for once, its vector stored once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.index import index_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.embed import estimated_tokens
from pipeline.store.documents import text_hash
from pipeline.store.tables import answers, calls, chunks, documents, query_vectors, questions
from tests.support.databases import fetch_rows
from tests.support.fallback import corpus, fallback_job
from tests.support.fallback import questions as questions_of
from tests.support.ledger import assert_paid_once
from tests.support.waiting import process_exited, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]
FINAL_RUN_TIMEOUT_S = 480

N_AIRPORTS = 100  # a fallback class: own retrieval only
N_CITIES = 200  # every managed answer misses: one managed call, then own retrieval
CONCURRENCY = 16
KILLS = 3
# Each kill lands once the server has seen this many more own-retrieval calls (no tool) than
# at the previous kill: progress, not a guess at how fast the child starts.
KILL_AFTER_CALLS = (20, 60)
FALLBACK = """
fallback = "own_retrieval"
fallback_classes = ["airports"]
fallback_when = "ungrounded"
"""


def _no_tool_calls(stats: dict) -> int:
    return stats["requests"]["by_tool"].get("none", 0)


def _embed_calls(stats: dict) -> int:
    return stats["requests"]["by_kind"].get("embed", 0)


async def _embed_rows(url: str) -> list[tuple[str, int]]:
    """The ledger's embedding rows in the order written: (outcome, input tokens)."""
    rows = await fetch_rows(
        url,
        sa.select(calls.c.outcome, calls.c.input_tokens)
        .where(calls.c.step == "embed")
        .order_by(calls.c.id),
    )
    return [(outcome, tokens) for outcome, tokens in rows]


def _generate_calls(stats: dict) -> int:
    return stats["requests"]["by_kind"].get("developer", 0)


@pytest.mark.parametrize("dense", [False, True], ids=["lexical", "dense"])
async def test_sigkills_during_fallback_calls_then_completion_pay_for_each_answer_once(
    tmp_path: Path, dense: bool
) -> None:
    rng = random.Random(77)
    config = EmulatorConfig(
        seed=13,
        latency_p50_ms=40,
        latency_p99_ms=200,
        ungrounded_share=0.0,
        miss_words=frozenset({"population"}),
        miss_ungrounded_share=0.7,
        miss_chunkless_share=0.3,
    )
    lost_at_kills: list[int] = []
    embeds_lost_at_kills: list[int] = []
    with running_emulator(config) as emu:
        spec = fallback_job(
            tmp_path,
            base_url=emu.base_url,
            n_airports=N_AIRPORTS,
            n_cities=N_CITIES,
            ungrounded_retries=0,
            grounding=FALLBACK,
            retrieval="dense = true\nembedding_dimensions = 64" if dense else "",
            overrides=[f"limits.concurrency={CONCURRENCY}"],
        )
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("GEMINI_API_KEY", emu.api_key)
            assert await index_command(spec) == 0
        index_before = await _index_rows(spec.database_url)
        index_embeds = _embed_calls(emu.stats())
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += ["--set", f"limits.concurrency={CONCURRENCY}"]
        for kill in range(KILLS):
            child = subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            target = _no_tool_calls(emu.stats()) + rng.randint(*KILL_AFTER_CALLS)

            try:
                wait_until(
                    lambda target=target: _no_tool_calls(emu.stats()) >= target,
                    f"run {kill + 1} reaching {target} own calls",
                    abort=process_exited(child),
                )
                emu.hold()  # the calls in flight at the kill stay the few the child started
                child.send_signal(signal.SIGKILL)
                child.wait()
            finally:
                emu.release()
                if child.poll() is None:
                    child.kill()
                    child.wait()
            seen = _generate_calls(emu.stats())
            stored = len(
                await fetch_rows(
                    spec.database_url, sa.select(calls.c.id).where(calls.c.step != "embed")
                )
            )
            lost_at_kills.append(seen - stored - sum(lost_at_kills))
            embeds_stored = len(await _embed_rows(spec.database_url))
            embeds_seen = _embed_calls(emu.stats())
            embeds_lost_at_kills.append(embeds_seen - embeds_stored - sum(embeds_lost_at_kills))
        assert _no_tool_calls(emu.stats()) > 0  # the kills landed during fallback calls

        final = subprocess.run(
            command, env=env, capture_output=True, timeout=FINAL_RUN_TIMEOUT_S, check=False
        )
        assert final.returncode == 0, final.stderr.decode()
        total = _generate_calls(emu.stats())
        embed = _embed_calls(emu.stats())

    url = spec.database_url
    states = await fetch_rows(
        url, sa.select(questions.c.qclass, questions.c.state, questions.c.next_route)
    )
    assert len(states) == N_AIRPORTS + N_CITIES
    assert {(state, route) for _, state, route in states} == {("done", None)}
    # One managed answer per city question and one own answer per question, each paid once.
    await assert_paid_once(url, N_CITIES, step="ground")
    await assert_paid_once(url, N_AIRPORTS + N_CITIES, step="own")
    latest = await fetch_rows(
        url, sa.select(answers.c.route).where(answers.c.superseded_at.is_(None))
    )
    assert {route for (route,) in latest} == {"own"} and len(latest) == N_AIRPORTS + N_CITIES
    # The only calls beyond the stored ones are those in flight at each kill.
    print(f"calls: {total} in all; in flight at the kills: {lost_at_kills}")
    if not dense:
        assert embed == index_embeds == 0
    else:
        # Every embedding call the server saw is in the ledger but those in flight at a kill;
        # the ledger's rows for questions' texts add up to each text once (their token
        # estimates sum to the texts' own), and each text has one stored vector.
        ledger_embeds = await _embed_rows(url)
        print(f"embed calls: {embed} in all; in flight at the kills: {embeds_lost_at_kills}")
        assert embed == len(ledger_embeds) + sum(embeds_lost_at_kills)
        assert all(0 <= lost <= CONCURRENCY for lost in embeds_lost_at_kills)
        texts = [q["question"] for q in questions_of(N_AIRPORTS, N_CITIES)]
        run_rows = ledger_embeds[index_embeds:]
        assert {outcome for outcome, _ in run_rows} == {"ok"}
        assert sum(tokens for _, tokens in run_rows) == estimated_tokens(texts)
        assert len(run_rows) < len(texts)  # batched: questions waiting share a call
        stored = await fetch_rows(url, sa.select(query_vectors.c.text_hash))
        assert sorted(h for (h,) in stored) == sorted({text_hash(t) for t in texts})
    assert total == N_CITIES + (N_AIRPORTS + N_CITIES) + sum(lost_at_kills)
    assert all(0 <= lost <= CONCURRENCY * 3 for lost in lost_at_kills)
    # The index was read, never written: the same rows, none twice.
    assert await _index_rows(url) == index_before
    assert index_before[0] == len(corpus())


async def _index_rows(url: str) -> tuple[int, int, int]:
    """Documents, chunks, and distinct (document, ordinal) keys of the chunks."""
    n_docs = (await fetch_rows(url, sa.select(sa.func.count()).select_from(documents)))[0][0]
    keys = await fetch_rows(url, sa.select(chunks.c.document_id, chunks.c.ordinal))
    return int(n_docs), len(keys), len(set(keys))
