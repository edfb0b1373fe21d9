"""``answers``, ``sources``, ``supports`` and ``structured`` as written: call 1's answers,
call 2's objects, a group of outcomes, reused answers and own retrieval's routes.

Persisting grounded answers with their sources and supports (group commit).

One call to :func:`persist_answers` writes a whole batch of answers in the caller's transaction:
three multi-row inserts instead of a transaction per row. Answers are versioned
(:mod:`pipeline.store.versions`): a question asked again gets version n + 1, compared with
version n (``changed``), which it then supersedes; nothing is deleted. The unique key on
``(question_id, version)`` guarantees one stored answer per question and version; an answer
that arrives for a version already stored (a lease lost to another worker) is dropped, never
duplicated. Each answer says which path gave it (``route``, below); a
managed answer handed over to own retrieval marks its question's next call 1 in the same
transaction, and an own answer clears that mark.

Persisting structured outputs (call 2), in the writer's transaction.

Structured objects are versioned like answers (:mod:`pipeline.store.versions`): a question
structured again (a new answer, ``ground restructure``, a changed schema) gets version n + 1,
which supersedes version n; nothing is deleted.

A group of outcomes stored in the caller's transaction: the one place that writes them.

An outcome is what came of one question's step: its answer or structured object, the ledger
rows of the calls it made, and the question's next state (:class:`StoredOutcome`; the run's
:class:`~pipeline.run.verdicts.Outcome` is one). Three callers store groups of them, each in
its own transaction and with its own budget row settled first: the online run's writer
(:mod:`pipeline.online.writer`), batch collection (:mod:`pipeline.batch.collect`) and the
outcomes an earlier run kept in its spill file (:mod:`pipeline.commands.spilled`).

A commit whose acknowledgement was lost with the connection went through: run again, it
leaves out the outcomes whose calls the ledger holds already (:func:`unstored`).

Reused answers (``[job] reuse_answers_within``): finding a stored answer to the same
request, and what its sources were resolved to.

An answer is stored with its ``reuse_key`` (:func:`pipeline.job.calls.reuse_key`: the
backend, the model and the exact call-1 body, so the question text, tools and prompt
settings). A question asked with the same key, in any job of the database, may take the
latest *grounded* answer stored under it within the window, unless that answer is itself a
copy (``reused_from``): copies point at the answer that was paid for.

Own retrieval's routing, as stored: which path answered and which path comes next.

* ``answers.route``: :data:`~pipeline.rows.ROUTE_MANAGED` (the grounded call) or
  :data:`~pipeline.rows.ROUTE_OWN` (own retrieval's numbered passages).
* ``questions.next_route``: ``ROUTE_OWN`` when the question's next call 1 goes through own
  retrieval whatever its class: set when a managed answer that missed is stored and handed
  over (``[grounding] fallback_when``, :func:`hand_over`), and by ``ground retry --via
  own_retrieval`` (:func:`requeue_via_own`); cleared when an own answer is stored
  (:func:`clear_next_route`). A run killed between the two calls therefore resumes at the own
  call: the hand-over is stored with the managed answer, in one transaction.
* A stored own answer's passages (:func:`own_passages`): its sources, in the order the prompt
  numbered them, from which its citations are rebuilt exactly (call 2 after a restart).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.grounding.hosts import without_userinfo
from pipeline.grounding.mapping import GroundedAnswer, Source
from pipeline.grounding.policy import registrable_domain
from pipeline.grounding.version_diff import SourceFacts, compare
from pipeline.job.states import QuestionState, SourceState, Verdict
from pipeline.rows import ROUTE_OWN, AnswerRecord, CallRecord, StateChange, StructuredRecord
from pipeline.store.engine import insert_ignoring_conflicts
from pipeline.store.ledger import persist_calls, stored_call_keys
from pipeline.store.queue import apply_state_changes
from pipeline.store.resolution import Lookup
from pipeline.store.tables import answers, questions, sources, structured, supports
from pipeline.store.versions import clear_reask, latest_answers, requeued, supersede

__all__ = [
    "Reusable",
    "StoredAnswers",
    "StoredOwnAnswer",
    "VerdictOf",
    "handed_over",
    "keys_ungrounded_before",
    "own_passages",
    "requeue_via_own",
    "reusable_answer",
    "reusable_answers",
    "store_outcomes",
    "unstored",
]

VerdictOf = Callable[[str | None], Verdict]


@dataclass(slots=True)
class StoredAnswers:
    """What a batch stored: question id -> answer id, and the sources left to resolve."""

    answer_ids: dict[int, int] = field(default_factory=dict)
    lookups: list[Lookup] = field(default_factory=list)  # each source stored "pending"


async def persist_answers(
    connection: AsyncConnection,
    records: Sequence[AnswerRecord],
    now: dt.datetime,
    verdict_of: VerdictOf,
) -> StoredAnswers:
    """Insert answers, sources and supports in the caller's transaction.

    ``verdict_of`` classifies each source URI up front (pipeline.links.rules.initial_verdict):
    a publisher URL is stored as its own destination at once; a redirect is stored pending.
    Answers whose version is already stored are skipped (and absent from the result); a new
    version is compared with the latest stored one and supersedes it.
    """
    stored = StoredAnswers()
    if not records:
        return stored
    verdicts = await _source_verdicts(connection, records, verdict_of)
    rows = await _answer_rows(connection, records, verdicts, now)
    # ON CONFLICT DO NOTHING: a second answer for the same version of a question (its lease
    # was lost to another worker, which stored first) is skipped even when both commit at once,
    # or come in one batch (then the first is stored, and only its sources and supports).
    result = await connection.execute(
        insert_ignoring_conflicts(connection, answers).returning(
            answers.c.id, answers.c.question_id, answers.c.version
        ),
        rows,
    )
    inserted = {(row.question_id, row.version): row.id for row in result}
    fresh: list[tuple[AnswerRecord, int]] = []  # each stored record, with its answer's id
    for record in records:
        answer_id = inserted.pop((record.question_id, record.version), None)
        if answer_id is not None:
            fresh.append((record, answer_id))
            stored.answer_ids[record.question_id] = answer_id
    kept = [r for r, _ in fresh]
    await supersede(connection, answers, [(r.question_id, r.version) for r in kept], now)
    # Only a question with an answer is ever marked to be asked again: a first answer has
    # nothing to clear (a first pass then makes no UPDATE here).
    await clear_reask(connection, [r.question_id for r in kept if r.version > 1])
    await hand_over(connection, [r.question_id for r in kept if r.hand_over])
    await clear_next_route(connection, [r.question_id for r in kept if r.route == ROUTE_OWN])
    await _persist_sources(connection, fresh, verdicts, now, stored)
    return stored


async def _source_verdicts(
    connection: AsyncConnection, records: Sequence[AnswerRecord], verdict_of: VerdictOf
) -> dict[int, list[Verdict]]:
    """Each record's source verdicts (keyed by ``id(record)``): a reused answer's sources keep
    the verdicts of the answer it was copied from; the others are classified up front."""
    origins = await origin_verdicts(
        connection, [r.reused_from for r in records if r.reused_from is not None]
    )
    return {
        id(r): [
            origins.get(r.reused_from or 0, {}).get(source.index) or verdict_of(source.uri)
            for source in r.answer.sources
        ]
        for r in records
    }


async def _answer_rows(
    connection: AsyncConnection,
    records: Sequence[AnswerRecord],
    verdicts: dict[int, list[Verdict]],
    now: dt.datetime,
) -> list[dict[str, Any]]:
    """The answers' rows, a new version compared with the latest one stored."""
    earlier = await latest_answers(connection, [r.question_id for r in records if r.version > 1])
    rows = []
    for record in records:
        row = _answer_row(record, now)
        if record.question_id in earlier:
            old_text, old_sources = earlier[record.question_id]
            new_sources = _facts(record.answer.sources, verdicts[id(record)])
            moved = compare(old_text, old_sources, record.answer.text, new_sources)
            row["changed"], row["changes"] = bool(moved), list(moved)
        rows.append(row)
    return rows


async def _persist_sources(
    connection: AsyncConnection,
    fresh: Sequence[tuple[AnswerRecord, int]],
    verdicts: dict[int, list[Verdict]],
    now: dt.datetime,
    stored: StoredAnswers,
) -> None:
    """The stored answers' sources and supports; each pending source is added to
    ``stored.lookups`` (to resolve)."""
    source_rows: list[dict[str, Any]] = []
    support_rows: list[dict[str, Any]] = []
    for record, answer_id in fresh:
        for source, verdict in zip(record.answer.sources, verdicts[id(record)], strict=True):
            source_rows.append(_source_row(answer_id, source, verdict))
            if verdict.status == SourceState.PENDING and source.uri is not None:
                uri = without_userinfo(source.uri)
                stored.lookups.append(
                    Lookup(answer_id, source.index, uri, now, first_version=record.version == 1)
                )
        support_rows.extend(_support_rows(answer_id, record.answer))
    if source_rows:
        await connection.execute(sources.insert(), source_rows)
    if support_rows:
        await connection.execute(supports.insert(), support_rows)


def _facts(found: Sequence[Source], verdicts: Sequence[Verdict]) -> list[SourceFacts]:
    return [
        SourceFacts(
            s.kind, s.title, s.domain, v.destination, pending=v.status == SourceState.PENDING
        )
        for s, v in zip(found, verdicts, strict=True)
    ]


def _answer_row(record: AnswerRecord, now: dt.datetime) -> dict[str, Any]:
    answer = record.answer
    usage = record.response.usage_metadata
    return {
        "question_id": record.question_id,
        "version": record.version,
        "changed": None,
        "changes": None,
        "text": answer.text,
        "grounded": answer.grounded,
        "finish_reason": record.finish_reason,
        "model_version": record.response.model_version,
        "response_id": record.response.response_id,
        "web_search_queries": list(answer.web_search_queries),
        "retrieval_queries": list(answer.retrieval_queries),
        "image_search_queries": list(answer.image_search_queries),
        "search_entry_point_html": answer.search_entry_point_html,
        "prompt_tokens": usage.prompt_token_count,
        "candidates_tokens": usage.candidates_token_count,
        "tool_use_prompt_tokens": usage.tool_use_prompt_token_count,
        "thoughts_tokens": usage.thoughts_token_count,
        "total_tokens": usage.total_token_count,
        "maps_widget_token": answer.maps_widget_token,
        "dynamic_retrieval_score": answer.dynamic_retrieval_score,
        "url_context_statuses": (
            [{"url": url, "status": status} for url, status in answer.url_statuses]
            if answer.url_statuses
            else None
        ),
        "tool_parts": answer.tool_parts,
        "route": record.route,
        "settings": record.settings,
        "reuse_key": record.reuse_key,
        "reused_from": record.reused_from,
        "avoided_domains": (
            list(record.avoided_domains) if record.avoided_domains is not None else None
        ),
        "coverage": answer.coverage,
        "warnings": list(answer.warnings),
        "latency_ms": record.latency_ms,
        "created_at": now,
        # The body is UTF-8 JSON; errors="replace" only matters for a hostile body, which
        # would not have parsed this far.
        "raw_response": record.raw_response.decode("utf-8", errors="replace"),
    }


def _source_row(answer_id: int, s: Source, verdict: Verdict) -> dict[str, Any]:
    row = s.to_dict()
    row["chunk_index"] = row.pop("index")
    if s.uri is not None:  # a user:password@ in a link is never sent, nor kept
        row["uri"] = without_userinfo(s.uri)
    row["custom_metadata"] = row["custom_metadata"] or None
    return {
        "answer_id": answer_id,
        **row,
        "destination": verdict.destination,
        "destination_domain": registrable_domain(verdict.destination),
        "resolve_status": verdict.status,
        "resolve_error": verdict.reason,
        "resolve_attempts": 0,
    }


def _support_rows(answer_id: int, answer: GroundedAnswer) -> list[dict[str, Any]]:
    return [
        {
            "answer_id": answer_id,
            "ordinal": ordinal,
            "part_index": c.part_index,
            "byte_start": c.byte_start,
            "byte_end": c.byte_end,
            "char_start": c.start,
            "char_end": c.end,
            "text": c.text,
            "chunk_indices": list(c.chunk_indices),
            "confidence_scores": None if c.confidence_scores is None else list(c.confidence_scores),
            "offsets_over": c.offsets_over,
        }
        for ordinal, c in enumerate(answer.citations)
    ]


# -- structured ----------------------------------------------------------------------------


async def persist_structured(
    connection: AsyncConnection, records: Sequence[StructuredRecord], now: dt.datetime
) -> None:
    """One structured output per question and version: a late duplicate is dropped, never
    stored twice; a new version supersedes the ones before."""
    if not records:
        return
    result = await connection.execute(
        insert_ignoring_conflicts(connection, structured).returning(
            structured.c.question_id, structured.c.version
        ),
        [
            {
                "question_id": r.question_id,
                "version": r.version,
                "answer_version": r.answer_version,
                "schema_hash": r.schema_hash,
                "valid": r.valid,
                "value": r.value,
                "raw_text": r.raw_text,
                "errors": list(r.errors),
                "provenance": r.provenance,
                "supported_fraction": r.supported_fraction,
                "flagged": r.flagged,
                "model_version": r.model_version,
                "calls": r.calls,
                "created_at": now,
            }
            for r in records
        ],
    )
    await supersede(connection, structured, [(row.question_id, row.version) for row in result], now)


# -- outcomes ------------------------------------------------------------------------------


class StoredOutcome(Protocol):
    """What is stored of one outcome."""

    @property
    def change(self) -> StateChange | None: ...  # None: handed back untouched
    @property
    def answer(self) -> AnswerRecord | None: ...
    @property
    def structured(self) -> StructuredRecord | None: ...
    @property
    def calls(self) -> Sequence[CallRecord]: ...


StoredT = TypeVar("StoredT", bound=StoredOutcome)


async def store_outcomes(
    connection: AsyncConnection,
    batch: Sequence[StoredOutcome],
    now: dt.datetime,
    verdict_of: VerdictOf,
    owner: str | None = None,
) -> StoredAnswers:
    """Store ``batch`` in the caller's transaction: answers, structured objects, ledger rows,
    state changes. The caller settles its budget row first, if it counts one.

    Every paid outcome is kept: its ledger rows always, its answer unless that version of the
    question's answer is stored already. With ``owner`` (the online run's writer), a state
    change is written only while the question is still leased to ``owner``, or when its
    answer, late, is the one stored here (it finishes the question). Without it (a batch's
    lines, kept outcomes) every change is written."""
    stored = await persist_answers(
        connection, [o.answer for o in batch if o.answer is not None], now, verdict_of
    )
    await persist_structured(
        connection, [o.structured for o in batch if o.structured is not None], now
    )
    await persist_calls(connection, [c for o in batch for c in o.calls])
    changes = [o.change for o in batch if o.change is not None]
    await apply_state_changes(connection, changes, owner, finishing=stored.answer_ids.keys())
    return stored


async def unstored(connection: AsyncConnection, outcomes: Sequence[StoredT]) -> list[StoredT]:
    """``outcomes`` but those a commit stored already: one whose calls the ledger holds (a
    commit whose acknowledgement was lost with the connection went through). The rest of a
    stored outcome (its answer, structured object, state change) is stored once either way:
    their unique keys and absolute values make them safe to write again."""
    asked = [c.question_id for o in outcomes for c in o.calls if c.question_id is not None]
    if not asked:
        return list(outcomes)
    in_ledger = await stored_call_keys(connection, asked)
    return [o for o in outcomes if not any(_identity(c) in in_ledger for c in o.calls)]


def _identity(call: CallRecord) -> tuple[int | None, str, dt.datetime]:
    return (call.question_id, call.step, call.started_at)


# -- reuse ---------------------------------------------------------------------------------


# A copied answer's sources keep these verdicts; the rest are judged and resolved afresh.
KEPT_VERDICTS = (SourceState.RESOLVED, SourceState.DIRECT)


@dataclass(frozen=True, slots=True)
class Reusable:
    """A stored answer another question may take: its id and its call-1 response."""

    answer_id: int
    raw_response: str


async def reusable_answer(
    connection: AsyncConnection, reuse_key: str, since: dt.datetime
) -> Reusable | None:
    """The latest grounded answer stored under ``reuse_key`` at or after ``since`` that is
    not itself a copy; None when there is none."""
    a = answers.c
    row = (
        await connection.execute(
            sa.select(a.id, a.raw_response)
            .where(
                a.reuse_key == reuse_key,
                a.created_at >= since,
                a.grounded.is_(True),
                a.reused_from.is_(None),
            )
            .order_by(a.created_at.desc(), a.id.desc())
            .limit(1)
        )
    ).first()
    return None if row is None else Reusable(int(row.id), row.raw_response)


async def origin_verdicts(
    connection: AsyncConnection, answer_ids: Sequence[int]
) -> dict[int, dict[int, Verdict]]:
    """answer id -> chunk index -> what that answer's source was resolved to (resolved or
    direct ones only): a copy keeps its original's destinations instead of resolving
    redirect links that may have expired since."""
    if not answer_ids:
        return {}
    s = sources.c
    rows = await connection.execute(
        sa.select(s.answer_id, s.chunk_index, s.resolve_status, s.destination).where(
            s.answer_id.in_(sorted(set(answer_ids))), s.resolve_status.in_(KEPT_VERDICTS)
        )
    )
    found: dict[int, dict[int, Verdict]] = {}
    for answer_id, chunk_index, status, destination in rows:
        found.setdefault(answer_id, {})[chunk_index] = Verdict(status, destination)
    return found


async def reusable_answers(
    connection: AsyncConnection, reuse_keys: Sequence[str], since: dt.datetime
) -> dict[str, Reusable]:
    """:func:`reusable_answer` for many keys in one query: key -> the latest grounded
    original stored under it at or after ``since`` (a key without one is left out)."""
    if not reuse_keys:
        return {}
    a = answers.c
    rows = await connection.execute(
        sa.select(a.reuse_key, a.id, a.raw_response)
        .where(
            a.reuse_key.in_(sorted(set(reuse_keys))),
            a.created_at >= since,
            a.grounded.is_(True),
            a.reused_from.is_(None),
        )
        .order_by(a.created_at, a.id)
    )
    return {key: Reusable(int(id_), raw) for key, id_, raw in rows}  # the latest wins


# -- routes --------------------------------------------------------------------------------


async def hand_over(connection: AsyncConnection, question_ids: Iterable[int]) -> None:
    """These questions' next call 1 goes through own retrieval."""
    ids = sorted(set(question_ids))
    if ids:
        q = questions.c
        await connection.execute(
            questions.update().where(q.id.in_(ids)).values(next_route=ROUTE_OWN)
        )


async def clear_next_route(connection: AsyncConnection, question_ids: Iterable[int]) -> None:
    """An own answer is stored for these questions: their next call 1 follows the job."""
    ids = sorted(set(question_ids))
    if ids:
        q = questions.c
        await connection.execute(
            questions.update()
            .where(q.id.in_(ids), q.next_route.is_not(None))
            .values(next_route=None)
        )


async def requeue_via_own(
    connection: AsyncConnection, job_id: int, error_class: str | None = None
) -> int:
    """Move the job's ``ungrounded`` questions back to ``pending``, to be asked again through
    own retrieval (``ground retry --state ungrounded --via own_retrieval``), with a fresh
    attempt budget. Their stored answers stay the latest until the own answers are stored."""
    q = questions.c
    condition = sa.and_(q.job_id == job_id, q.state == QuestionState.UNGROUNDED)
    if error_class is not None:
        condition = sa.and_(condition, q.error_class == error_class)
    result = await connection.execute(
        questions.update()
        .where(condition)
        .values(requeued(next_route=ROUTE_OWN, reask=False, last_error=None))
    )
    return result.rowcount


async def keys_ungrounded_before(
    connection: AsyncConnection, keys: Collection[str], before: dt.datetime
) -> set[str]:
    """Those of the request ``keys`` (``answers.reuse_key``) under which an ungrounded answer
    was stored before ``before``, in any job: questions that came back ungrounded before."""
    a = answers.c
    wanted = sorted(set(keys))
    found: set[str] = set()
    for start in range(0, len(wanted), _KEY_CHUNK):
        rows = await connection.scalars(
            sa.select(a.reuse_key)
            .where(
                a.reuse_key.in_(wanted[start : start + _KEY_CHUNK]),
                a.grounded.is_(False),
                a.created_at < before,
            )
            .distinct()
        )
        found.update(rows)
    return found


_KEY_CHUNK = 500  # keys per look-up: well inside SQLite's bound-parameter limit


async def handed_over(connection: AsyncConnection, job_id: int) -> bool:
    """Whether any of the job's questions is to be asked through own retrieval next
    (``next_route = "own"``: handed over after a miss, or requeued by ``ground retry --via
    own_retrieval``), whatever the job's routing."""
    q = questions.c
    found = await connection.execute(
        sa.select(q.id).where(q.job_id == job_id, q.next_route == ROUTE_OWN).limit(1)
    )
    return found.first() is not None


@dataclass(frozen=True, slots=True)
class StoredPassage:
    """One source of a stored own answer: a passage as the prompt numbered it."""

    doc_id: str
    title: str | None
    uri: str | None
    text: str


@dataclass(frozen=True, slots=True)
class StoredOwnAnswer:
    passages: tuple[StoredPassage, ...]  # by chunk index: [n] in the prompt is index n - 1
    query: str | None  # the search that found them (the answer's retrieval_queries)


async def own_passages(
    connection: AsyncConnection, question_id: int, version: int
) -> StoredOwnAnswer | None:
    """The passages of the question's own answer of ``version``; None when that version is
    not an own answer."""
    a, s = answers.c, sources.c
    row = (
        await connection.execute(
            sa.select(a.id, a.retrieval_queries).where(
                a.question_id == question_id, a.version == version, a.route == ROUTE_OWN
            )
        )
    ).first()
    if row is None:
        return None
    rows = await connection.execute(
        sa.select(s.doc_id, s.title, s.uri, s.text)
        .where(s.answer_id == row.id)
        .order_by(s.chunk_index)
    )
    passages = tuple(StoredPassage(r.doc_id or "", r.title, r.uri, r.text or "") for r in rows)
    queries: Sequence[str] = row.retrieval_queries or ()
    return StoredOwnAnswer(passages, queries[0] if queries else None)
