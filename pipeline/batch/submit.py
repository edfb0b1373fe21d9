"""Batch submission: claim due questions into batches, write and upload their JSONL file,
hold the budget, create the batch and store its name at once.

::

    claim (lease to the batch) -> JSONL file (cut to the byte limit and to the budget)
        -> budget hold -> resumable upload (where it went stored) -> find-or-create
        -> name stored

The input lines are the Batch API's own (:meth:`~pipeline.batch.api.BatchApi.encode_line`:
``{"key", "request"}`` for the Developer API, the key in the request's labels for Vertex);
everything else here is the same for both.

Three kinds of batch (``batches.step``): ``ground`` (call 1 of questions without an answer),
``own`` (call 1 through own retrieval, ``[grounding] fallback = "own_retrieval"``: the
fallback classes, and the follow-up of the answers handed over; :mod:`pipeline.batch.own`)
and, with ``[batch] structure = true`` and the structure step on, ``structure`` (call 2 built
from each question's stored grounded answer by :func:`pipeline.structure.build_structure_body`,
an own answer's citations rebuilt from its passages; the repair of an invalid output carries
its validation errors, :mod:`pipeline.batch.verdicts`).

Every step resumes from the database: a batch still ``preparing`` is written and uploaded
again (uploads are free, and Cloud Storage keeps content it already holds: same MD5, no
second upload; a budget hold already taken is not taken twice), one ``uploaded`` is looked up
by its unique display name before anything is created.
"""

from __future__ import annotations

import datetime as dt
import logging
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.batch.api import BatchApi
from pipeline.batch.budget import BatchBudget
from pipeline.batch.copies import BatchCopies, Identical
from pipeline.batch.own import OwnLines
from pipeline.gemini.batch_wire import PartWriter
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.calls import CallPlan
from pipeline.job.sections import BatchSection
from pipeline.rows import ROUTE_OWN
from pipeline.run.context import RunContext
from pipeline.run.own_verdicts import rebuild_own_answer
from pipeline.run.verdicts import stored_answer
from pipeline.store import batch_items
from pipeline.store import batches as store
from pipeline.store.answers import own_passages

log = logging.getLogger(__name__)


class Submitter:
    """Brings a job's batches to ``submitted``."""

    def __init__(
        self,
        ctx: RunContext,
        plan: CallPlan,
        budget: BatchBudget,
        settings: BatchSection,
        workdir: Path | None,
        copies: BatchCopies | None = None,
    ) -> None:
        """``settings``: ``[batch]`` (the size of a batch and its file, its questions' lease);
        ``workdir``: where input files are written (a temporary directory by default);
        ``copies``: reuse (:mod:`pipeline.batch.copies`), when the job has it on."""
        self.ctx = ctx
        self.budget = budget
        self._plan = plan
        self._settings = settings
        self._workdir = workdir
        # Own retrieval's lines; its embedder is set by the runner under [retrieval] dense.
        self.own_lines = OwnLines(ctx, plan.own, None) if plan.own is not None else None
        self._copies = copies

    @property
    def structure_in_batch(self) -> bool:
        """Call 2 goes as structure batches (``[batch] structure``, the structure step on)."""
        return self._plan.structure is not None and self._settings.structure

    # -- claim --------------------------------------------------------------------------------

    async def claim_all(self, *, ground: bool = True) -> list[store.BatchRow]:
        """Lease every due question, ``[batch] max_requests`` per batch: call 1 (without an
        answer; unless ``ground`` is false), then call 2 (grounded answer stored) when it goes
        in batch too. Nothing new once the budget has cut a batch short."""
        claimed: list[store.BatchRow] = []
        for claim in self._claims(ground):
            while self.budget.short is None:
                row = await self._claim(claim)
                if row is None:
                    break
                claimed.append(row)
                if row.step == store.OWN:
                    self.ctx.summary.batch.own_retrieval += row.requests
        return claimed

    def _claims(self, ground: bool) -> list[_Claim]:
        """What is claimed, in order: call 1 (the managed questions, then those routed to own
        retrieval by class), the follow-up of the answers handed over (only those never
        tried there when call 1 is not claimed again: retries online), then call 2."""
        plan, own = self._plan, self._plan.own
        claims: list[_Claim] = []
        if ground:
            not_routed = batch_items.not_routed(own.classes) if own is not None else None
            claims.append(_Claim(store.GROUND, plan.ground.model, not_routed))
            if own is not None and own.classes:
                claims.append(_Claim(store.OWN, own.model, batch_items.routed_where(own.classes)))
        if own is not None:
            handed = batch_items.handed_over_where(fresh_only=not ground)
            claims.append(_Claim(store.OWN, own.model, handed, batch_items.FOLLOWUP))
        if self.structure_in_batch:
            assert plan.structure is not None
            claims.append(_Claim(store.STRUCTURE, plan.structure.model))
        return claims

    async def _claim(self, claim: _Claim) -> store.BatchRow | None:
        return await self.ctx.db.transaction(
            "claiming a batch",
            lambda c: store.claim_batch(
                c,
                self.ctx.job_id,
                model=claim.model,
                limit=self._settings.max_requests,
                lease=dt.timedelta(seconds=self._settings.lease_s),
                step=claim.step,
                where=claim.where,
                label=claim.label,
                scope=self.ctx.scope,
            ),
        )

    # -- submit -------------------------------------------------------------------------------

    async def submit(self, client: BatchApi, row: store.BatchRow) -> bool:
        """Bring a batch to ``submitted`` (its name stored), from whatever phase it is in.
        False when it was not created (nothing of it fits the budget: its row is gone)."""
        if row.phase == store.PREPARING and self._copies is not None:
            sifted = await self._copies.sift(row)  # what a stored answer answers: copied
            if sifted is None:
                return False
            row = sifted
        if row.phase == store.PREPARING:
            uploaded = await self._upload(client, row)
            if uploaded is None:
                return False
            row = uploaded
        if row.phase == store.UPLOADED:
            assert row.input_name is not None
            # A create whose answer was lost (the run died) left the batch at Google: find it.
            job = await client.find(row.display_name)
            if job is None:
                job = await client.create(row.model, row.input_name, display_name=row.display_name)
                self.ctx.summary.batches_created.append(job.name)
                if row.display_name.startswith(f"{batch_items.FOLLOWUP}-"):
                    self.ctx.summary.batch.followups += 1
            submitted = {
                "batch": job.name,
                "step": row.step,
                "model": row.model,
                "requests": row.requests,
            }

            async def created(c: AsyncConnection) -> None:
                await store.set_submitted(
                    c,
                    row.id,
                    job.name,
                    job.state,
                    job.create_time,
                    output_uri_prefix=job.output_uri_prefix,
                )
                await self.ctx.record_event(c, "batch.submitted", submitted)

            await self.ctx.db.transaction("recording a created batch", created)
            log.info(
                "%s batch %s created for %d questions",
                row.step,
                job.name,
                row.requests,
                extra={"action": "batch_created", "batch": job.name, "count": row.requests},
            )
        return True

    async def _upload(self, client: BatchApi, row: store.BatchRow) -> store.BatchRow | None:
        """Write the batch's file (cut to one part and to the budget), hold the budget for
        what is kept, upload it. None when nothing is kept."""
        budget = self.budget
        db = self.ctx.db
        fresh = budget.enabled and (
            await db.read("reading a batch's hold", lambda c: budget.held(c, row.id)) is None
        )
        left = await budget.left() if fresh else 0
        price = self.ctx.prices.batch(row.model)
        with tempfile.TemporaryDirectory(dir=self._workdir, prefix="ground-batch-") as tmp:
            writer = PartWriter(
                Path(tmp),
                stem=row.display_name,
                max_bytes=self._settings.max_bytes,
                max_requests=self._settings.max_requests,
                encode=client.encode_line,
            )
            seen: list[int] = []
            costs: dict[int, int] = {}  # worst cases, with a budget to hold
            total, over_budget = 0, False
            identical = None if self._copies is None else self._copies.identical(row)
            try:
                async for key, body in self._request_lines(row, identical):
                    seen.append(int(key))
                    if fresh and not over_budget:
                        cost = budget.worst_micro(body, row.step, price, row.model)
                        over_budget = total + cost > left  # this one and every later one out
                        total += cost
                        costs[int(key)] = cost
                    if not over_budget:
                        writer.add(key, body)
            finally:
                parts = writer.close()
            kept = [int(key) for key in parts[0].keys] if parts else []
            worst = sum(costs[k] for k in kept) if fresh else 0
            asked = len(kept)
            if identical is not None:  # identical questions go (or stay out) with their first
                if not seen:  # each one's request is asked by another batch now: none sent
                    await db.transaction("giving back", lambda c: store.abandon(c, row.id))
                    return None
                seen += list(identical.followers)
                kept += identical.kept(kept)
            if not await self._keep(row, seen, kept, worst, fresh=fresh):
                budget.cut(row, 0, len(seen), left)
                return None
            if over_budget:
                budget.cut(row, len(kept), len(seen) - len(kept), left)
            sent = await client.upload(parts[0].path, display_name=row.display_name)
        self.ctx.summary.batch.batched += asked

        async def uploaded(connection: AsyncConnection) -> store.BatchRow:
            await store.set_uploaded(connection, row.id, sent.name, sent.md5)
            return await store.get(connection, row.id)

        return await db.transaction("recording an uploaded batch", uploaded)

    async def _keep(
        self, row: store.BatchRow, seen: list[int], kept: list[int], worst: int, *, fresh: bool
    ) -> bool:
        """One transaction: what was left out of the file goes back to the queue and the
        budget is held for the rest (unless held already, ``fresh`` False); the batch is
        abandoned (False) when nothing fits."""
        dropped = sorted(set(seen) - set(kept))

        async def keep(connection: AsyncConnection) -> bool:
            if kept and (not fresh or await self.budget.hold(connection, row, worst)):
                await store.drop_items(connection, row.id, dropped)
                return True
            await store.abandon(connection, row.id)
            return False

        return await self.ctx.db.transaction("keeping a batch's questions", keep)

    async def _request_lines(
        self, row: store.BatchRow, identical: Identical | None
    ) -> AsyncIterator[tuple[str, bytes]]:
        """The batch's lines, in row-key order; with ``identical``, one per request key (the
        first question of each: the others are filled from its answer at collect)."""
        if row.step == store.STRUCTURE:
            async for line in self._structure_lines(row.id):
                yield line
            return
        if row.step == store.OWN:
            assert self.own_lines is not None, "an own batch, and the job has no [retrieval]"
            async for line in self.own_lines.lines(row):
                yield line
            return
        ground = self._plan.ground
        copies = self._copies
        async for q in store.batch_questions(self.ctx.db, row.id):
            asked_before = (
                identical is not None
                and copies is not None
                and not identical.first(q.id, copies.key(q.text, q.meta))
            )
            if asked_before:
                continue
            yield str(q.id), ground.body(q.text, q.meta)

    async def _structure_lines(self, batch_id: int) -> AsyncIterator[tuple[str, bytes]]:
        call = self._plan.structure
        assert call is not None
        async for q in batch_items.structure_questions(self.ctx.db, batch_id):
            answer = await self._stored_answer(q)
            yield str(q.id), call.body(q.text, answer, q.repair_errors)

    async def _stored_answer(self, q: batch_items.StructureQuestion) -> GroundedAnswer:
        """A question's stored answer: an own one's citations rebuilt from its passages."""
        if q.answer_route == ROUTE_OWN:
            stored = await self.ctx.db.read(
                "reading an own answer's passages",
                lambda c: own_passages(c, q.id, q.answer_version),
            )
            if stored is not None:
                return rebuild_own_answer(q.answer_raw, stored)
        return stored_answer(q.answer_raw)


@dataclass(frozen=True, slots=True)
class _Claim:
    """One kind of batch to claim: its step and model, a further condition on its questions,
    and its display name's label (the step's when None)."""

    step: str
    model: str
    where: sa.ColumnElement[bool] | None = None
    label: str | None = None
