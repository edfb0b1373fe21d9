"""Vertex AI batch prediction (``batchPredictionJobs``), as the emulator serves it.

Routes (wired in :mod:`pipeline.emulator.server`, Bearer token as on the Vertex surface;
shapes and sources in docs/vertex-batch.md):

* ``POST /v1/projects/{p}/locations/{l}/batchPredictionJobs``: ``{displayName, model:
  "publishers/google/models/{m}", inputConfig: {instancesFormat: "jsonl", gcsSource: {uris}},
  outputConfig: {predictionsFormat: "jsonl", gcsDestination: {outputUriPrefix}}, labels}``;
  answers the ``BatchPredictionJob`` (``JOB_STATE_PENDING``). An input object that is not in
  the emulator's Cloud Storage makes the job end ``JOB_STATE_FAILED`` (with ``error``).
* ``GET .../batchPredictionJobs`` (``filter`` on ``display_name``, ``labels.k``, ``state``
  joined by ``AND``; ``pageSize``, ``pageToken``; newest first), ``GET .../{id}``,
  ``POST .../{id}:cancel`` (``{}``; the next get says ``JOB_STATE_CANCELLING``, later ones
  ``JOB_STATE_CANCELLED``; a finished job answers 400 FAILED_PRECONDITION).
* ``DELETE .../{id}``: "can only be called on jobs that already finished" (else 400
  FAILED_PRECONDITION); answers the delete's Operation, already ``done`` (its ``response``
  ``google.protobuf.Empty``). The job leaves get and list; its output objects stay.
* ``completionStats`` (``successfulCount``, ``failedCount``, ``incompleteCount``) from
  ``RUNNING`` on, as the rows progress (:mod:`pipeline.emulator.batch_progress`).

Time is the emulator's clock and the knobs are the Developer API batch's: a job is
``PENDING`` for the first half of ``batch_delay_s``, ``RUNNING`` for the second, then
``SUCCEEDED``; the first ``batch_expire_first`` prediction jobs end ``EXPIRED`` instead.
When a job ends, ``{outputUriPrefix}/prediction-model-{createTime}/predictions.jsonl``
appears in Cloud Storage (``outputInfo.gcsOutputDirectory`` names the directory), made line
by line as it is read, in *reverse* input order (Vertex does not keep the input order, so a
client must join by key). What it holds: every row (SUCCEEDED); the first half (EXPIRED:
"completed rows are exported"); the rows done by the cancel time (CANCELLED). With
``prediction_shard_lines`` the rows go to ``predictions_0001.jsonl``, ``..._0002``, ...

A row is ``{"request", "status", "response", "processed_time"}`` with the request echoed as
sent (its ``labels`` too) and ``status`` ``""``. ``batch_failed_row_share`` of rows (drawn per
job and key) fail instead: no ``response``, an error text in ``status``; a request the
online API would refuse (an unknown field, say) fails with its 400. With
``batch_drop_failed_rows`` the drawn rows are left out of the output while
``completionStats.failedCount`` still counts them. Answers are built as
online ones, on the Vertex surface, as if made at the job's creation time.

Tests can hold ``create`` (the job exists, its name not yet sent) and ``poll`` (a get);
``arrived`` counts the held requests.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from pipeline.emulator import batch_progress, draws, error_bodies, models, responses
from pipeline.emulator.clock import Clock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.gates import StageGates
from pipeline.emulator.request import VERTEX, parse
from pipeline.emulator.storage import StorageService

STAGES = ("create", "poll")
PAGE_SIZE = 100  # jobs per list page by default
MODEL_PREFIX = "publishers/google/models/"
_JSON = error_bodies.JSON_CONTENT_TYPE
_FAILED_ROW = b"prediction-failed-row"
_FAILED_STATUS = (
    'Internal Server Error: {"error": {"code": 500, "message": "Internal error encountered.",'
    ' "status": "INTERNAL"}}'
)
_TERMINAL = frozenset(
    {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"}
)
_DELETE_METADATA = "type.googleapis.com/google.cloud.aiplatform.v1.DeleteOperationMetadata"
_CLAUSE = re.compile(r'^\s*(display_name|state|labels\.[a-z0-9_-]+)\s*=\s*"?([^"]*)"?\s*$')


def _rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _processed(seconds: float) -> str:
    """``processed_time`` as output lines carry it: ``2026-04-13T10:18:18.102004+00:00``."""
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).isoformat()


@dataclass(slots=True)
class _Job:
    number: int  # 0, 1, ... in creation order
    name: str
    project: str
    location: str
    display_name: str
    model: str  # the model id (no publishers/ prefix)
    input_uris: list[str]
    output_prefix: str
    labels: dict[str, str]
    created: float
    seq_base: int
    lines: list[bytes] = field(default_factory=list)
    error: str | None = None  # set: the job ends FAILED with this message
    cancelled_at: float | None = None
    cancel_polls: int = 0
    published: bool = False
    failed_rows: int = 0  # failed rows among those exported, counted when published
    outcomes: bytearray | None = None  # per row: batch_progress.OK / FAILED, made once
    deleted_at: float | None = None


class PredictionService(StageGates):
    """The emulator's prediction jobs (one per :class:`~pipeline.emulator.server.Emulator`),
    reading inputs from and writing outputs to ``storage``."""

    def __init__(
        self,
        config: EmulatorConfig,
        clock: Clock,
        seed_key: bytes,
        redirect_key: bytes,
        next_seq: Callable[[int], int],
        storage: StorageService,
    ) -> None:
        super().__init__(STAGES)
        self.config = config
        self.clock = clock
        self.seed_key = seed_key
        self.redirect_key = redirect_key
        self._next_seq = next_seq
        self.storage = storage
        self.jobs: dict[str, _Job] = {}
        self.counts: Counter[str] = Counter()
        self.base_url = ""  # scheme://host of the last request: where answers' links point
        storage.before_read = self.publish_due

    # --- test control -----------------------------------------------------------------

    def snapshot(self) -> dict[str, int]:
        base = dict.fromkeys(
            ("prediction_jobs_created", "prediction_jobs_cancelled", "prediction_jobs_deleted"), 0
        )
        return {**base, **self.counts, **self.held()}

    # --- state --------------------------------------------------------------------------

    def state(self, job: _Job) -> str:
        if job.error is not None:
            return "JOB_STATE_FAILED"
        if job.cancelled_at is not None:
            return "JOB_STATE_CANCELLING" if job.cancel_polls < 1 else "JOB_STATE_CANCELLED"
        delay = self.config.batch_delay_s
        age = self.clock.time() - job.created
        if age >= delay:
            if job.number < self.config.batch_expire_first:
                return "JOB_STATE_EXPIRED"
            return "JOB_STATE_SUCCEEDED"
        return "JOB_STATE_PENDING" if age < delay / 2 else "JOB_STATE_RUNNING"

    def _end(self, job: _Job) -> float:
        if job.cancelled_at is not None:
            return job.cancelled_at
        return job.created + self.config.batch_delay_s

    def _rows_done(self, job: _Job, state: str) -> int:
        """How many rows a job has answered (a finished one: exported)."""
        at = job.cancelled_at if job.cancelled_at is not None else self.clock.time()
        return batch_progress.rows_done(
            len(job.lines),
            state.removeprefix("JOB_STATE_"),
            at - job.created,
            self.config.batch_delay_s,
        )

    def _outcomes(self, job: _Job) -> bytearray:
        """Which rows fail (made once per job; the output lines agree with it)."""
        if job.outcomes is None:
            job.outcomes = batch_progress.row_outcomes(
                (_row_input(raw, index) for index, raw in enumerate(job.lines)),
                VERTEX,
                lambda key: self._failed(job, key),
            )
        return job.outcomes

    def _completion_stats(self, job: _Job, rows: int) -> dict[str, str]:
        counts = batch_progress.progress(self._outcomes(job), rows)
        return {
            "successfulCount": str(counts.succeeded),
            "failedCount": str(counts.failed),
            "incompleteCount": str(counts.pending),
        }

    def _output_dir(self, job: _Job) -> str:
        stamp = dt.datetime.fromtimestamp(job.created, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[
            :-3
        ]
        return f"{job.output_prefix.rstrip('/')}/prediction-model-{stamp}Z"

    def resource(self, job: _Job) -> dict[str, Any]:
        state = self.state(job)
        done = state in _TERMINAL
        doc: dict[str, Any] = {
            "name": job.name,
            "displayName": job.display_name,
            "model": MODEL_PREFIX + job.model,
            "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": job.input_uris}},
            "outputConfig": {
                "predictionsFormat": "jsonl",
                "gcsDestination": {"outputUriPrefix": job.output_prefix},
            },
            "state": state,
            "createTime": _rfc3339(job.created),
            "updateTime": _rfc3339(self._end(job) if done else job.created),
        }
        if state != "JOB_STATE_PENDING":
            doc["startTime"] = _rfc3339(job.created + self.config.batch_delay_s / 2)
        if done:
            doc["endTime"] = _rfc3339(self._end(job))
        if job.error is not None:
            doc["error"] = {"code": 3, "message": job.error}
        elif done:
            rows = self._rows_done(job, state)
            self._publish(job, state, rows)
            doc["outputInfo"] = {"gcsOutputDirectory": self._output_dir(job)}
            doc["completionStats"] = self._completion_stats(job, rows)
        elif state != "JOB_STATE_PENDING":
            doc["completionStats"] = self._completion_stats(job, self._rows_done(job, state))
        if job.labels:
            doc["labels"] = dict(job.labels)
        return doc

    def publish_due(self) -> None:
        """Write the outputs of the jobs that have ended (before any storage read)."""
        for job in self.jobs.values():
            if not job.published and job.error is None:
                state = self.state(job)
                if state in _TERMINAL:
                    self._publish(job, state, self._rows_done(job, state))

    # --- routes -------------------------------------------------------------------------

    async def create(self, request: web.Request) -> web.Response:
        project, location = request.match_info["project"], request.match_info["location"]
        self.base_url = f"{request.scheme}://{request.host}"
        try:
            spec = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            raise error_bodies.invalid_json("Unexpected token.") from None
        if not isinstance(spec, dict):
            raise error_bodies.invalid_json("Root element must be a message.")
        display = spec.get("displayName")
        if not isinstance(display, str) or not display:
            raise error_bodies.invalid_argument("BatchPredictionJob.display_name is required.")
        model = str(spec.get("model") or "")
        model_id = model.removeprefix(MODEL_PREFIX)
        if not model.startswith(MODEL_PREFIX) or models.traits(model_id) is None:
            raise error_bodies.publisher_model_not_found(
                f"projects/{project}/locations/{location}/{model or 'publishers/google/models/'}"
            )
        inputs = spec.get("inputConfig") or {}
        outputs = spec.get("outputConfig") or {}
        uris = (inputs.get("gcsSource") or {}).get("uris") or []
        prefix = (outputs.get("gcsDestination") or {}).get("outputUriPrefix") or ""
        if inputs.get("instancesFormat") != "jsonl" or not uris:
            raise error_bodies.invalid_argument(
                "The emulator takes Cloud Storage JSONL input only (inputConfig.instancesFormat"
                ' "jsonl", gcsSource.uris).'
            )
        if outputs.get("predictionsFormat") != "jsonl" or not prefix.startswith("gs://"):
            raise error_bodies.invalid_argument(
                "The emulator writes Cloud Storage JSONL output only (outputConfig."
                'predictionsFormat "jsonl", gcsDestination.outputUriPrefix gs://...).'
            )
        lines, error = self._input_lines(uris)
        number = len(self.jobs)
        digest = hashlib.blake2b(b"job" + number.to_bytes(8, "big"), key=self.seed_key[:64])
        job_id = int(digest.hexdigest()[:15], 16)  # numeric, as Vertex job ids are
        name = f"projects/{project}/locations/{location}/batchPredictionJobs/{job_id}"
        labels = spec.get("labels")
        if not isinstance(labels, dict):
            labels = {}
        job = _Job(
            number=number,
            name=name,
            project=project,
            location=location,
            display_name=display,
            model=model_id,
            input_uris=[str(u) for u in uris],
            output_prefix=prefix,
            labels={str(k): str(v) for k, v in labels.items()},
            created=self.clock.time(),
            seq_base=self._next_seq(len(lines)),
            lines=lines,
            error=error,
        )
        self.jobs[name] = job
        self.counts["prediction_jobs_created"] += 1
        self.counts["prediction_requests"] += len(lines)
        await self._gate("create")  # the job exists: a client killed now never hears its name
        return _json(self.resource(job))

    def _input_lines(self, uris: list[Any]) -> tuple[list[bytes], str | None]:
        lines: list[bytes] = []
        for uri in uris:
            bucket, _, name = str(uri).removeprefix("gs://").partition("/")
            data = self.storage.read(bucket, name)
            if data is None:
                return [], f"Failed to read the input file {uri}: no such object."
            lines.extend(line for line in data.splitlines() if line.strip())
        return lines, None

    async def get(self, request: web.Request) -> web.Response:
        name = _job_name(request)
        self.base_url = f"{request.scheme}://{request.host}"
        self.counts["prediction_polls"] += 1
        await self._gate("poll")
        job = self._live(name)
        if job is None:
            raise _not_found(name)
        document = self.resource(job)
        if job.cancelled_at is not None:
            job.cancel_polls += 1
        return _json(document)

    async def cancel(self, request: web.Request) -> web.Response:
        tail = request.match_info["tail"]
        job_id, _, method = tail.partition(":")
        if method != "cancel":
            raise error_bodies.ApiError(404, "NOT_FOUND", f"Method {method!r} is not found.")
        name = _job_name(request, job_id)
        job = self._live(name)
        if job is None:
            raise _not_found(name)
        state = self.state(job)
        if state in _TERMINAL:
            raise error_bodies.ApiError(
                400,
                "FAILED_PRECONDITION",
                f"The BatchPredictionJob {name} is in state {state} and cannot be cancelled.",
                kind="not_cancellable",
            )
        if job.cancelled_at is None:
            job.cancelled_at = self.clock.time()
            self.counts["prediction_jobs_cancelled"] += 1
        return _json({})

    async def list(self, request: web.Request) -> web.Response:
        self.base_url = f"{request.scheme}://{request.host}"
        m = request.match_info
        parent = f"projects/{m['project']}/locations/{m['location']}"
        wanted = _filter(request.query.get("filter", ""))
        size = int(request.query.get("pageSize") or PAGE_SIZE)
        start = int(request.query.get("pageToken") or 0)
        ordered = [
            job
            for job in sorted(self.jobs.values(), key=lambda j: -j.number)
            if job.name.startswith(parent + "/")
            and job.deleted_at is None
            and self._matches(job, wanted)
        ]
        page = ordered[start : start + size]
        body: dict[str, Any] = {}
        if page:
            body["batchPredictionJobs"] = [self.resource(job) for job in page]
        if start + size < len(ordered):
            body["nextPageToken"] = str(start + size)
        self.counts["prediction_lists"] += 1
        return _json(body)

    def _live(self, name: str) -> _Job | None:
        """The job by name, unless it was deleted."""
        job = self.jobs.get(name)
        return None if job is None or job.deleted_at is not None else job

    async def delete(self, request: web.Request) -> web.Response:
        """``DELETE .../{id}`` of a finished job: the delete's Operation, already done."""
        name = _job_name(request)
        job = self._live(name)
        if job is None:
            raise _not_found(name)
        state = self.state(job)
        if state not in _TERMINAL:
            raise error_bodies.ApiError(
                400,
                "FAILED_PRECONDITION",
                f"The BatchPredictionJob {name} is in state {state} and cannot be deleted.",
                kind="not_deletable",
            )
        if not job.published and job.error is None:
            self._publish(job, state, self._rows_done(job, state))  # its output stays
        job.deleted_at = self.clock.time()
        self.counts["prediction_jobs_deleted"] += 1
        stamp = _rfc3339(job.deleted_at)
        parent = name.rsplit("/batchPredictionJobs/", 1)[0]
        return _json(
            {
                "name": f"{parent}/operations/{job.name.rsplit('/', 1)[-1]}0",
                "metadata": {
                    "@type": _DELETE_METADATA,
                    "genericMetadata": {"createTime": stamp, "updateTime": stamp},
                },
                "done": True,
                "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
            }
        )

    def _matches(self, job: _Job, wanted: list[tuple[str, str]]) -> bool:
        for field_name, value in wanted:
            if field_name == "display_name" and job.display_name != value:
                return False
            if field_name == "state" and self.state(job) != value:
                return False
            if field_name.startswith("labels.") and job.labels.get(field_name[7:]) != value:
                return False
        return True

    # --- output ---------------------------------------------------------------------------

    def _failed(self, job: _Job, key: bytes) -> bool:
        draw = draws.unit(self.seed_key, _FAILED_ROW, job.name.encode() + b"\x00" + key)
        return draw < self.config.batch_failed_row_share

    def _dropped(self, job: _Job, index: int) -> bool:
        """A row drawn to fail that ``batch_drop_failed_rows`` leaves out of the output."""
        raw = job.lines[index]
        if not self.config.batch_drop_failed_rows or not self._failed(job, _key_of(raw, index)):
            return False
        self.counts["prediction_rows_dropped"] += 1
        return True

    def _publish(self, job: _Job, state: str, rows: int) -> None:
        if job.published:
            return
        job.published = True
        job.failed_rows = batch_progress.progress(self._outcomes(job), rows).failed
        directory = self._output_dir(job)
        bucket, _, base = directory.removeprefix("gs://").partition("/")
        order = [i for i in range(rows)[::-1] if not self._dropped(job, i)]  # no input order
        shard = self.config.prediction_shard_lines or max(1, rows)
        pieces = [order[i : i + shard] for i in range(0, len(order), shard)] or [[]]
        for n, piece in enumerate(pieces, start=1):
            name = "predictions.jsonl" if len(pieces) == 1 else f"predictions_{n:04d}.jsonl"
            self.storage.put(
                bucket,
                f"{base}/{name}",
                source=self._source(job, piece),
                lines=len(piece),
            )
        self.counts["prediction_outputs"] += len(pieces)
        self.counts[f"prediction_jobs_ended_{state.removeprefix('JOB_STATE_').lower()}"] += 1

    def _source(self, job: _Job, indices: list[int]) -> Callable[[], Iterator[bytes]]:
        def lines() -> Iterator[bytes]:
            for index in indices:
                yield self._output_line(job, index)

        return lines

    def _output_line(self, job: _Job, index: int) -> bytes:
        raw = job.lines[index]
        processed = _processed(job.created + self.config.batch_delay_s)
        try:
            document = orjson.loads(raw)
            request = document["request"]
            if not isinstance(request, dict):
                raise TypeError
        except (orjson.JSONDecodeError, KeyError, TypeError):
            status = (
                'Bad Request: {"error": {"code": 400, "message": "Invalid JSON line: expected'
                ' {\\"request\\": GenerateContentRequest}.", "status": "INVALID_ARGUMENT"}}'
            )
            return orjson.dumps({"status": status, "processed_time": processed}) + b"\n"
        if self._failed(job, _key_of(raw, index)):
            return _row(request, _FAILED_STATUS, None, processed)
        try:
            req = parse(orjson.dumps(request), VERTEX)
        except error_bodies.ApiError as exc:
            status = "Bad Request: " + exc.body().decode()
            return _row(request, status, None, processed)
        traits = models.traits(job.model)
        assert traits is not None  # checked at create
        ctx = responses.Context(
            config=self.config,
            seed_key=self.seed_key,
            redirect_key=self.redirect_key,
            traits=traits,
            request=req,
            vertex=True,
            base_url=self.base_url,
            seq=job.seq_base + index,
            now=job.created,  # the links age from the job's creation
            project=job.project,
            location=job.location,
        )
        return _row(request, "", responses.build(ctx).body, processed)


def _row(request: Any, status: str, response: Any, processed: str) -> bytes:
    """One output line, keys in the order real lines carry them."""
    line: dict[str, Any] = {"request": request, "status": status}
    if response is not None:
        line["response"] = response
    line["processed_time"] = processed
    return orjson.dumps(line) + b"\n"


def _row_input(raw: bytes, index: int) -> tuple[bytes, object]:
    """``(draw key, request)`` of an input line; the request None when it cannot be read."""
    try:
        document = orjson.loads(raw)
        request = document["request"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return _key_of(raw, index), None
    return _key_of(raw, index), request if isinstance(request, dict) else None


def _key_of(raw: bytes, index: int) -> bytes:
    """What a failed-row draw is keyed by: the line's ``ground_key`` label, else its index."""
    found = re.search(rb'"ground_key"\s*:\s*"([^"]*)"', raw)
    return found.group(1) if found else str(index).encode()


def _filter(text: str) -> list[tuple[str, str]]:
    wanted = []
    for clause in re.split(r"\s+AND\s+", text.strip()) if text.strip() else ():
        found = _CLAUSE.match(clause)
        if found is None:
            raise error_bodies.invalid_argument(f"Unsupported filter: {clause!r}.")
        wanted.append((found.group(1), found.group(2).replace('\\"', '"')))
    return wanted


def _job_name(request: web.Request, job_id: str | None = None) -> str:
    m = request.match_info
    return (
        f"projects/{m['project']}/locations/{m['location']}/batchPredictionJobs/"
        f"{job_id if job_id is not None else m['tail']}"
    )


def _not_found(name: str) -> error_bodies.ApiError:
    return error_bodies.ApiError(
        404, "NOT_FOUND", f'The BatchPredictionJob "{name}" does not exist.', kind="not_found"
    )


def _json(document: Any) -> web.Response:
    return web.Response(body=orjson.dumps(document), headers={"Content-Type": _JSON})
