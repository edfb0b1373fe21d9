"""A job for the review desk's tests, filled by the store's own functions (no run): questions
of three classes, grounded answers with a cited source and Search suggestions, a hostile
answer, an unanswered question, a second answer version, and citation verdicts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.clock import utcnow
from pipeline.gemini.wire import decode_response
from pipeline.grounding.mapping import ground_answer
from pipeline.job.spec import JobSpec, load_jobspec
from pipeline.job.states import Verdict
from pipeline.rows import AnswerRecord
from pipeline.serve.app import build_app
from pipeline.serve.context import DeskContext
from pipeline.store import queue
from pipeline.store.answers import persist_answers
from pipeline.store.tables import answers, citation_verdicts, questions, sources
from tests.support.databases import postgres_engine, sqlite_engine

CLASSES = ("geo", "history", "science")
HOSTILE_ID = "q0006"
HOSTILE_TEXT = (
    'Tall <script>document.title="pwned"</script><img src=x onerror="alert(1)">'
    ' <a href="javascript:alert(1)">x</a> </iframe> end.'
)
UNANSWERED_ID = "q0005"
REVISED_ID = "q0002"
SUGGESTIONS = '<style>.chip{color:red}</style><div class="chip">everest height</div>'
VERIFY_MODEL = "gemini-3.8-flash"


def response_body(text: str, *, domain: str, grounded: bool = True) -> bytes:
    """A generateContent body: ``text`` whose first word is cited from one web source."""
    first = text.split(" ", 1)[0]
    metadata = {
        "webSearchQueries": ["everest height"],
        "searchEntryPoint": {"renderedContent": SUGGESTIONS},
        "groundingChunks": [
            {
                "web": {
                    "uri": f"https://vertexaisearch.cloud.google.com/grounding-api-redirect/{domain}",
                    "title": f"{domain} <b>title</b>",
                    "domain": domain,
                }
            }
        ],
        "groundingSupports": [
            {
                "segment": {"endIndex": len(first.encode()), "text": first},
                "groundingChunkIndices": [0],
            }
        ],
    }
    candidate = {
        "content": {"role": "model", "parts": [{"text": text}]},
        "finishReason": "STOP",
        **({"groundingMetadata": metadata} if grounded else {}),
    }
    body = {
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 9, "totalTokenCount": 14},
        "modelVersion": "gemini-3.8-flash",
    }
    return json.dumps(body).encode()


def answer_record(question_id: int, text: str, domain: str, version: int = 1) -> AnswerRecord:
    body = response_body(text, domain=domain, grounded=question_id % 4 != 0)
    response = decode_response(body)
    candidate = response.candidates[0]
    answer = ground_answer(candidate)
    return AnswerRecord(
        question_id, answer, response, candidate.finish_reason, body, 800.0, version=version
    )


@dataclass(frozen=True, slots=True)
class DeskJob:
    engine: AsyncEngine
    job_id: int
    ids: dict[str, int]  # qid -> questions.id


async def fill(engine: AsyncEngine, n: int) -> DeskJob:
    """``n`` questions (``q0000``...), every one answered but :data:`UNANSWERED_ID`."""
    async with engine.begin() as connection:
        job_id = await queue.ensure_job(connection, "desk")
        rows = [
            queue.NewQuestion(f"q{i:04d}", f"How tall is peak {i}? word{i % 7}", CLASSES[i % 3])
            for i in range(n)
        ]
        ids = await queue.insert_new_questions(connection, job_id, rows)
    now = utcnow()
    records = []
    for qid, question_id in sorted(ids.items(), key=lambda item: item[1]):
        if qid == UNANSWERED_ID:
            continue
        text = HOSTILE_TEXT if qid == HOSTILE_ID else f"Peak {qid} is 8,849 m high. Banana{qid}."
        domain = "example.org" if question_id % 2 else "example.com"
        records.append(answer_record(question_id, text, domain))
    async with engine.begin() as connection:
        await persist_answers(connection, records, now, lambda _uri: Verdict("pending"))
        answered = [ids[q] for q in ids if q != UNANSWERED_ID]
        await connection.execute(
            questions.update().where(questions.c.id.in_(answered)).values(state="done")
        )
        await connection.execute(
            sources.update().values(
                destination="https://" + sources.c.domain + "/page",
                resolve_status="resolved",
                resolved_at=now,
            )
        )
    async with engine.begin() as connection:  # a second version of one answer
        revised = answer_record(
            ids[REVISED_ID], "Peak q0002 is 8,848 m high now.", "example.net", 2
        )
        await persist_answers(connection, [revised], utcnow(), lambda _uri: Verdict("pending"))
        first_answer = await connection.scalar(
            sa.select(answers.c.id).where(
                answers.c.question_id == ids["q0001"], answers.c.superseded_at.is_(None)
            )
        )
        await connection.execute(
            citation_verdicts.insert().values(
                answer_id=first_answer,
                question_id=ids["q0001"],
                claim_index=0,
                target="https://example.org/page",
                url="https://example.org/page",
                verdict="contradicted",
                quote="<b>8,000 m</b> says the page",
                model=VERIFY_MODEL,
                created_at=utcnow(),
            )
        )
    return DeskJob(engine, job_id, ids)


@asynccontextmanager
async def desk_engine(backend: str, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if backend == "sqlite":
        async with sqlite_engine(tmp_path) as engine:
            yield engine
    else:
        async with postgres_engine() as engine:
            yield engine


@asynccontextmanager
async def desk_client(job: DeskJob) -> AsyncIterator[tuple[TestClient, DeskContext]]:
    context = DeskContext(
        job_id=job.job_id,
        job_name="desk",
        model="gemini-3.8-flash",
        backend="developer",
        base_url="http://127.0.0.1:1",
        verify_model=VERIFY_MODEL,
    )
    client = TestClient(TestServer(build_app(job.engine, context)))
    await client.start_server()
    try:
        opened = await client.get("/", params={"token": context.access_token})
        assert opened.status == 200  # the session's cookie set, then the overview
        yield client, context
    finally:
        await client.close()


def desk_job(directory: Path, engine: AsyncEngine) -> JobSpec:
    """The job file of the desk's test job (``desk``) in ``directory``, on ``engine``'s
    database, for the commands: ``ground serve``, ``export``, ``review import``."""
    url = engine.url.render_as_string(hide_password=False)
    url = url.replace("+aiosqlite", "").replace("+asyncpg", "")
    (directory / "questions.jsonl").write_text("", encoding="utf-8")
    path = directory / "job.toml"
    path.write_text(
        f'[job]\nname = "desk"\ndatabase = "{url}"\n[source]\nfile = "questions.jsonl"\n'
        '[model]\nname = "gemini-3.8-flash"\nbase_url = "http://127.0.0.1:1"\n',
        encoding="utf-8",
    )
    return load_jobspec(path)
