"""The Batch API and the Files API it reads from, as the emulator serves them (Developer API).

Routes (wired in :mod:`pipeline.emulator.server`; shapes as google-genai reads them, see
:mod:`pipeline.gemini.batch` and :mod:`pipeline.gemini.batch_wire`):

* ``POST /upload/v1beta/files`` with ``X-Goog-Upload-Protocol: resumable`` and
  ``X-Goog-Upload-Command: start``: answers ``X-Goog-Upload-URL`` (``?upload_id=``); that URL
  takes ``upload`` / ``upload, finalize`` chunks at ``X-Goog-Upload-Offset`` (a wrong offset
  is a 400), and ``query`` (``X-Goog-Upload-Size-Received``). Finalized: ``{"file": ...}``.
* ``POST /v1beta/models/{model}:batchGenerateContent``: an Operation whose ``metadata`` is
  the batch (``BATCH_STATE_PENDING``). Input is a file (``inputConfig.fileName``) or inline
  (``inputConfig.requests.requests[]``, each ``{"request", "metadata"}``; the body at most
  20 MB). An inline batch's answers come back in the batch itself:
  ``output.inlinedResponses.inlinedResponses[]``, each ``{"response" | "error", "metadata"}``
  in input order (the real API is reported to reorder them at scale: join by ``metadata``).
* ``GET /v1beta/batches``, ``GET /v1beta/batches/{id}``, ``POST /v1beta/batches/{id}:cancel``,
  ``DELETE /v1beta/batches/{id}`` (``{}``; the batch is gone from get and list, not cancelled,
  and its result file stays downloadable, as a deleted operation's output does).
* ``batchStats``: ``requestCount`` and, when not zero (proto3 JSON leaves zeros out),
  ``successfulRequestCount``, ``failedRequestCount``, ``pendingRequestCount``, as the rows
  progress (:mod:`pipeline.emulator.batch_progress`).
* An upload's metadata takes ``displayName`` or ``display_name`` (proto JSON parsers accept
  both; google-genai sends the snake_case one).
* ``GET /download/v1beta/files/{id}:download?alt=media`` (and the same without ``/download``,
  which is what google-genai requests): the result JSONL, generated line by line as it is
  sent, so a 100,000-line result costs the emulator no memory.

Time is the emulator's clock: a batch is ``PENDING`` for the first half of
``batch_delay_s``, ``RUNNING`` for the second, then ``SUCCEEDED`` (or ``EXPIRED`` for the first
``batch_expire_first`` batches). Its answers are built as if made at its creation time, so
their redirect links age from then. ``batch_failed_row_share`` of rows (drawn per batch and
key, so a retry can succeed) are ``{"key", "error": {...}}``; ``batch_poll_503_share`` of
polls answer 503. With ``batch_drop_failed_rows`` those drawn rows are left out of the result
file (and of ``inlinedResponses``) while ``batchStats`` still counts them failed: the output
lacks rows its stats report, which a client must reconcile (``batch_rows_dropped`` counts
the rows left out of each output served: a file downloaded twice counts twice).

Tests can stop the protocol at a step (:meth:`BatchService.hold`): ``upload`` (after the
file is stored, before the answer), ``create`` (after the batch exists, before its name is
sent), ``poll`` (before a get answers) and ``download`` (half the lines sent). Each held
request is counted in ``arrived``, so a test waits on that rather than on a timer.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
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
from pipeline.emulator.request import DEVELOPER, parse

_JSON = error_bodies.JSON_CONTENT_TYPE
_BATCH_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
_OUTPUT_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
_FAILED_ROW = b"batch-failed-row"
_POLL_503 = b"batch-poll-503"
STAGES = ("upload", "create", "poll", "download")
WRITE_LINES = 256  # result lines per write to the response stream
PAGE_SIZE = 50  # batches per list page by default
INLINE_LIMIT = 20 * 1024 * 1024  # bytes: the largest inline batch request


def _rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class _Upload:
    display_name: str
    size: int
    mime_type: str
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class _File:
    name: str
    display_name: str
    mime_type: str
    data: bytes
    created: float

    def resource(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "displayName": self.display_name,
            "mimeType": self.mime_type,
            "sizeBytes": str(len(self.data)),
            "createTime": _rfc3339(self.created),
            "updateTime": _rfc3339(self.created),
            "state": "ACTIVE",
            "source": "UPLOADED",
        }


@dataclass(slots=True)
class _Batch:
    number: int  # 0, 1, ... in creation order
    name: str
    display_name: str
    model: str
    file: _File | None  # a file batch's input; None for an inline batch
    inline: list[Any] | None  # an inline batch's requests: {"request", "metadata"}
    created: float  # clock seconds
    seq_base: int  # response sequence numbers seq_base .. seq_base + lines - 1
    lines: int  # rows (non-blank lines, or inline requests)
    cancelled_at: float | None = None
    failed_rows: int = 0
    deleted: bool = False
    outcomes: bytearray | None = None  # per row: batch_progress.OK / FAILED, made once
    inlined: list[dict[str, Any]] | None = None  # an inline batch's answers, made once


class BatchService(StageGates):
    """The emulator's files and batches (one per :class:`~pipeline.emulator.server.Emulator`).

    ``next_seq`` hands out response sequence numbers (shared with generateContent, so
    ``responseId`` and redirect nonces never repeat).
    """

    def __init__(
        self,
        config: EmulatorConfig,
        clock: Clock,
        seed_key: bytes,
        redirect_key: bytes,
        next_seq: Callable[[int], int],
    ) -> None:
        super().__init__(STAGES)
        self.config = config
        self.clock = clock
        self.seed_key = seed_key
        self.redirect_key = redirect_key
        self._next_seq = next_seq
        self.uploads: dict[str, _Upload] = {}
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        self.counts: Counter[str] = Counter()
        self._polls = 0
        self.base_url = ""  # scheme://host of the last request: where inline answers' links point

    # --- test control -----------------------------------------------------------------

    def snapshot(self) -> dict[str, int]:
        return {**self.counts, **self.held()}

    # --- state --------------------------------------------------------------------------

    def state(self, batch: _Batch) -> str:
        now = self.clock.time()
        if batch.cancelled_at is not None:
            return "BATCH_STATE_CANCELLED"
        delay = self.config.batch_delay_s
        age = now - batch.created
        if age >= delay:
            if batch.number < self.config.batch_expire_first:
                return "BATCH_STATE_EXPIRED"
            return "BATCH_STATE_SUCCEEDED"
        return "BATCH_STATE_PENDING" if age < delay / 2 else "BATCH_STATE_RUNNING"

    def operation(self, batch: _Batch) -> dict[str, Any]:
        state = self.state(batch)
        done = state in (
            "BATCH_STATE_SUCCEEDED",
            "BATCH_STATE_FAILED",
            "BATCH_STATE_CANCELLED",
            "BATCH_STATE_EXPIRED",
        )
        end = batch.cancelled_at or batch.created + self.config.batch_delay_s
        meta: dict[str, Any] = {
            "@type": _BATCH_TYPE,
            "model": f"models/{batch.model}",
            "displayName": batch.display_name,
            "createTime": _rfc3339(batch.created),
            "updateTime": _rfc3339(end if done else batch.created),
            "batchStats": self.stats(batch, state),
            "state": state,
            "name": batch.name,
        }
        if batch.file is not None:
            meta["inputConfig"] = {"fileName": batch.file.name}
        if done:
            meta["endTime"] = _rfc3339(end)
        if state == "BATCH_STATE_SUCCEEDED":
            if batch.file is not None:
                meta["output"] = {"responsesFile": f"files/batch-{batch.name.split('/')[-1]}"}
            else:
                meta["output"] = {"inlinedResponses": {"inlinedResponses": self._inlined(batch)}}
        operation: dict[str, Any] = {"name": batch.name, "metadata": meta}
        if done:
            operation["done"] = True
            if state == "BATCH_STATE_SUCCEEDED":
                operation["response"] = {"@type": _OUTPUT_TYPE, **meta["output"]}
        return operation

    def stats(self, batch: _Batch, state: str) -> dict[str, str]:
        """``batchStats`` as the rows have progressed; zero counts left out, as proto3 JSON
        leaves them out."""
        if state == "BATCH_STATE_PENDING":
            done = 0
        else:
            at = batch.cancelled_at if batch.cancelled_at is not None else self.clock.time()
            done = batch_progress.rows_done(
                batch.lines,
                state.removeprefix("BATCH_STATE_"),
                at - batch.created,
                self.config.batch_delay_s,
            )
        counts = (
            batch_progress.progress(self._outcomes(batch), done)
            if done
            else batch_progress.Progress(total=batch.lines, succeeded=0, failed=0)
        )
        stats = {"requestCount": str(counts.total)}
        for field_name, value in (
            ("successfulRequestCount", counts.succeeded),
            ("failedRequestCount", counts.failed),
            ("pendingRequestCount", counts.pending),
        ):
            if value:
                stats[field_name] = str(value)
        return stats

    def _outcomes(self, batch: _Batch) -> bytearray:
        """Which rows fail (made once per batch; the download agrees with it)."""
        if batch.outcomes is None:
            batch.outcomes = batch_progress.row_outcomes(
                self._rows(batch),
                DEVELOPER,
                lambda key: self._drawn_to_fail(batch, key),
            )
        return batch.outcomes

    def _rows(self, batch: _Batch) -> Iterator[tuple[bytes, object]]:
        """``(draw key, request)`` per row; the request None for a line that cannot be read."""
        if batch.inline is not None:
            for index, item in enumerate(batch.inline):
                request = item.get("request") if isinstance(item, dict) else None
                yield str(index).encode(), request
            return
        assert batch.file is not None
        for index, line in enumerate(batch.file.data.splitlines()):
            if line.strip():
                key, request = _read_line(line, index)
                yield key.encode(), request

    def _drawn_to_fail(self, batch: _Batch, key: bytes) -> bool:
        draw_input = batch.name.encode() + b"\x00" + key
        return draws.unit(self.seed_key, _FAILED_ROW, draw_input) < (
            self.config.batch_failed_row_share
        )

    def _dropped(self, batch: _Batch, key: bytes) -> bool:
        """A row drawn to fail that ``batch_drop_failed_rows`` leaves out of the output."""
        if not self.config.batch_drop_failed_rows or not self._drawn_to_fail(batch, key):
            return False
        self.counts["batch_rows_dropped"] += 1
        return True

    def _inlined(self, batch: _Batch) -> list[dict[str, Any]]:
        """An inline batch's ``inlinedResponses`` (made once, on first sight)."""
        if batch.inlined is None:
            assert batch.inline is not None
            answers: list[dict[str, Any]] = []
            for index, item in enumerate(batch.inline):
                if self._dropped(batch, str(index).encode()):
                    continue
                request = item.get("request") if isinstance(item, dict) else None
                outcome, body = self._answer(batch, index, str(index), request, self.base_url)
                answer: dict[str, Any] = {outcome: body}
                metadata = item.get("metadata") if isinstance(item, dict) else None
                if metadata:
                    answer["metadata"] = metadata
                answers.append(answer)
            batch.inlined = answers
        return batch.inlined

    # --- files --------------------------------------------------------------------------

    async def upload(self, request: web.Request) -> web.Response:
        """Both halves of the resumable protocol: ``start`` and the upload URL."""
        command = request.headers.get("X-Goog-Upload-Command", "").lower()
        if (upload_id := request.query.get("upload_id")) is None:
            return await self._start_upload(request, command)
        return await self._upload_chunk(request, upload_id, command)

    async def _start_upload(self, request: web.Request, command: str) -> web.Response:
        """``start``: a new upload session, answered with its URL."""
        if request.headers.get("X-Goog-Upload-Protocol", "").lower() != "resumable":
            raise error_bodies.invalid_argument("Only resumable uploads are supported here.")
        if command != "start":
            raise error_bodies.invalid_argument("Expected X-Goog-Upload-Command: start.")
        try:
            size = int(request.headers["X-Goog-Upload-Header-Content-Length"])
        except (KeyError, ValueError):
            raise error_bodies.invalid_argument(
                "X-Goog-Upload-Header-Content-Length is required."
            ) from None
        body = await request.read()
        meta = orjson.loads(body) if body else {}
        file = meta.get("file") if isinstance(meta, dict) else None
        display = ""
        if isinstance(file, dict):  # proto JSON: either spelling of a field name
            display = str(file.get("displayName") or file.get("display_name") or "")
        mime = request.headers.get("X-Goog-Upload-Header-Content-Type", "application/jsonl")
        upload_id = secrets.token_urlsafe(16)
        self.uploads[upload_id] = _Upload(display, size, mime)
        self.counts["uploads_started"] += 1
        url = f"{request.scheme}://{request.host}{request.path}?upload_id={upload_id}"
        return web.Response(
            body=b"",
            headers={
                "X-Goog-Upload-URL": url,
                "X-Goog-Upload-Status": "active",
                "X-Goog-Upload-Chunk-Granularity": "8388608",
            },
        )

    async def _upload_chunk(
        self, request: web.Request, upload_id: str, command: str
    ) -> web.Response:
        """The upload URL: ``query``, ``upload`` at an offset, and ``upload, finalize``."""
        pending = self.uploads.get(upload_id)
        if pending is None:
            raise error_bodies.ApiError(
                404, "NOT_FOUND", "No such upload session.", kind="no_upload"
            )
        if command == "query":
            return web.Response(
                headers={
                    "X-Goog-Upload-Status": "active",
                    "X-Goog-Upload-Size-Received": str(len(pending.data)),
                }
            )
        offset = int(request.headers.get("X-Goog-Upload-Offset", "-1"))
        if offset != len(pending.data):
            raise error_bodies.invalid_argument(
                f"Upload offset {offset} does not match the {len(pending.data)} bytes received."
            )
        pending.data += await request.read()
        if "finalize" not in command:
            return web.Response(headers={"X-Goog-Upload-Status": "active"})
        if len(pending.data) != pending.size:
            raise error_bodies.invalid_argument(
                f"Upload finalized at {len(pending.data)} bytes, {pending.size} announced."
            )
        del self.uploads[upload_id]
        name = f"files/{self._name_hex(b'file', len(self.files))}"
        stored = _File(name, pending.display_name, pending.mime_type, bytes(pending.data), 0.0)
        stored.created = self.clock.time()
        self.files[name] = stored
        self.counts["files_uploaded"] += 1
        await self._gate("upload")
        return web.Response(
            body=orjson.dumps({"file": stored.resource()}),
            headers={"Content-Type": _JSON, "X-Goog-Upload-Status": "final"},
        )

    async def file_get(self, request: web.Request) -> web.StreamResponse:
        tail = request.match_info["tail"]
        file_id, _, method = tail.partition(":")
        if method == "download":
            return await self.download(request, file_id)
        stored = self.files.get(f"files/{file_id}")
        if stored is None:
            raise _not_found(f"files/{file_id}")
        return web.Response(body=orjson.dumps(stored.resource()), headers={"Content-Type": _JSON})

    # --- batches ------------------------------------------------------------------------

    async def create(self, request: web.Request, model: str) -> web.Response:
        if models.traits(model) is None:
            raise error_bodies.model_not_found(model, "v1beta")
        self.base_url = f"{request.scheme}://{request.host}"
        raw = await request.read()
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise error_bodies.invalid_json("Unexpected token.") from None
        batch_spec = document.get("batch") if isinstance(document, dict) else None
        if not isinstance(batch_spec, dict):
            raise error_bodies.invalid_argument("* BatchGenerateContentRequest.batch: required.\n")
        stored, inline, raw_lines, lines = self._input(batch_spec, len(raw))
        number = len(self.batches)
        name = f"batches/{self._name_hex(b'batch', number)}"
        display = batch_spec.get("displayName") or batch_spec.get("display_name") or ""
        batch = _Batch(
            number=number,
            name=name,
            display_name=str(display),
            model=model,
            file=stored,
            inline=inline,
            created=self.clock.time(),
            seq_base=self._next_seq(raw_lines),
            lines=lines,
        )
        self.batches[name] = batch
        self.counts["batches_created"] += 1
        self.counts["inline_batches_created" if stored is None else "file_batches_created"] += 1
        self.counts["batch_requests"] += lines
        await self._gate("create")  # the batch exists: a client killed now never hears its name
        return web.Response(
            body=orjson.dumps(self.operation(batch)), headers={"Content-Type": _JSON}
        )

    def _input(
        self, batch_spec: dict[str, Any], size: int
    ) -> tuple[_File | None, list[Any] | None, int, int]:
        """A new batch's input: ``(file, inline requests, lines to number, rows)``."""
        input_config = batch_spec.get("inputConfig") or batch_spec.get("input_config") or {}
        file_name = input_config.get("fileName") or input_config.get("file_name")
        requests = input_config.get("requests")
        inline = requests.get("requests") if isinstance(requests, dict) else None
        if file_name:
            stored = self.files.get(file_name)
            if stored is None:
                raise _not_found(file_name)
            raw_lines = stored.data.count(b"\n") + (0 if stored.data.endswith(b"\n") else 1)
            rows = sum(1 for line in stored.data.splitlines() if line.strip())
            return stored, None, raw_lines, rows
        if isinstance(inline, list) and inline:
            if size > INLINE_LIMIT:
                raise error_bodies.invalid_argument(
                    f"Request payload size exceeds the limit: {INLINE_LIMIT} bytes."
                )
            return None, inline, len(inline), len(inline)
        raise error_bodies.invalid_argument(
            "* BatchGenerateContentRequest.batch.input_config: one of file_name or requests"
            " is required.\n"
        )

    def _live(self, name: str) -> _Batch | None:
        """The batch by name, unless it was deleted."""
        batch = self.batches.get(name)
        return None if batch is None or batch.deleted else batch

    async def get(self, request: web.Request) -> web.Response:
        tail = request.match_info["tail"]
        self.base_url = f"{request.scheme}://{request.host}"
        batch = self._live(f"batches/{tail}")
        self.counts["polls"] += 1
        seq = self._polls
        self._polls += 1
        await self._gate("poll")
        if draws.unit(self.seed_key, _POLL_503, seq.to_bytes(8, "big")) < (
            self.config.batch_poll_503_share
        ):
            self.counts["polls_503"] += 1
            raise error_bodies.unavailable()
        if batch is None:
            raise _not_found(f"batches/{tail}")
        return web.Response(
            body=orjson.dumps(self.operation(batch)), headers={"Content-Type": _JSON}
        )

    async def cancel(self, request: web.Request) -> web.Response:
        tail = request.match_info["tail"]
        batch_id, _, method = tail.partition(":")
        batch = self._live(f"batches/{batch_id}")
        if method != "cancel":
            raise error_bodies.ApiError(404, "NOT_FOUND", f"Method {method!r} is not found.")
        if batch is None:
            raise _not_found(f"batches/{batch_id}")
        if self.state(batch) in ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING"):
            batch.cancelled_at = self.clock.time()
            self.counts["batches_cancelled"] += 1
        return web.Response(body=b"{}", headers={"Content-Type": _JSON})

    async def list(self, request: web.Request) -> web.Response:
        size = int(request.query.get("pageSize") or PAGE_SIZE)
        start = int(request.query.get("pageToken") or 0)
        self.base_url = f"{request.scheme}://{request.host}"
        live = (b for b in self.batches.values() if not b.deleted)
        ordered = sorted(live, key=lambda b: -b.number)  # newest first
        page = ordered[start : start + size]
        body: dict[str, Any] = {"operations": [self.operation(b) for b in page]}
        if start + size < len(ordered):
            body["nextPageToken"] = str(start + size)
        return web.Response(body=orjson.dumps(body), headers={"Content-Type": _JSON})

    async def delete(self, request: web.Request) -> web.Response:
        """``DELETE batches/{id}``: the operation is forgotten (not cancelled); ``{}``."""
        name = f"batches/{request.match_info['tail']}"
        batch = self._live(name)
        if batch is None:
            raise _not_found(name)
        batch.deleted = True
        self.counts["batches_deleted"] += 1
        return web.Response(body=b"{}", headers={"Content-Type": _JSON})

    # --- results ------------------------------------------------------------------------

    async def download(self, request: web.Request, file_id: str) -> web.StreamResponse:
        prefix = "batch-"
        batch = (
            self.batches.get(f"batches/{file_id[len(prefix) :]}")
            if file_id.startswith(prefix)
            else None
        )
        if batch is None or batch.file is None or self.state(batch) != "BATCH_STATE_SUCCEEDED":
            stored = self.files.get(f"files/{file_id}")
            if stored is None:
                raise _not_found(f"files/{file_id}")
            return web.Response(body=stored.data, headers={"Content-Type": stored.mime_type})
        self.counts["downloads"] += 1
        response = web.StreamResponse(headers={"Content-Type": "application/jsonl"})
        await response.prepare(request)
        base_url = f"{request.scheme}://{request.host}"
        half = batch.lines // 2
        out: list[bytes] = []
        for index, line in enumerate(batch.file.data.splitlines()):
            if not line.strip():
                continue
            if index == half and out:
                await response.write(b"".join(out))
                out.clear()
                await self._gate("download")
            out.append(self._result_line(batch, index, line, base_url))
            if len(out) >= WRITE_LINES:
                await response.write(b"".join(out))
                out.clear()
        if out:
            await response.write(b"".join(out))
        await response.write_eof()
        return response

    def _name_hex(self, kind: bytes, number: int) -> str:
        """A resource id that looks like Google's (random hex) but follows from the seed, so
        every draw keyed by a batch's name (its failed rows) is the same in every run."""
        digest = hashlib.blake2b(kind + number.to_bytes(8, "big"), key=self.seed_key[:64])
        return digest.hexdigest()[:16]

    def _result_line(self, batch: _Batch, index: int, line: bytes, base_url: str) -> bytes:
        key, request = _read_line(line, index)
        if self._dropped(batch, key.encode()):
            return b""  # counted failed in batchStats, absent from the file
        if request is None:
            status = {"code": 3, "message": "Invalid JSON line: expected {key, request}."}
            return orjson.dumps({"key": key, "error": status}) + b"\n"
        outcome, body = self._answer(batch, index, key, request, base_url)
        return orjson.dumps({"key": key, outcome: body}) + b"\n"

    def _answer(
        self, batch: _Batch, index: int, key: str, request: object, base_url: str
    ) -> tuple[str, dict[str, Any]]:
        """``("response", GenerateContentResponse)`` or ``("error", Status)`` for one row."""
        if not isinstance(request, dict):
            return "error", {"code": 3, "message": "Invalid request: expected an object."}
        if self._drawn_to_fail(batch, key.encode()):
            batch.failed_rows += 1
            return "error", {
                "code": 13,
                "message": "Internal error encountered.",
                "status": "INTERNAL",
            }
        traits = models.traits(batch.model)
        assert traits is not None  # checked at create
        try:
            req = parse(orjson.dumps(request), DEVELOPER)
        except error_bodies.ApiError as exc:
            return "error", {"code": 3, "message": exc.message, "status": exc.status}
        ctx = responses.Context(
            config=self.config,
            seed_key=self.seed_key,
            redirect_key=self.redirect_key,
            traits=traits,
            request=req,
            vertex=False,
            base_url=base_url,
            seq=batch.seq_base + index,
            now=batch.created,  # the links age from the batch's creation
        )
        return "response", responses.build(ctx).body


def _read_line(line: bytes, index: int) -> tuple[str, object]:
    """A file line's key and request; the request None (the key its index) when the line is
    not ``{key, request}``."""
    try:
        document = orjson.loads(line)
        return str(document["key"]), document["request"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return str(index), None


def _not_found(name: str) -> error_bodies.ApiError:
    return error_bodies.ApiError(
        404, "NOT_FOUND", f"Requested entity was not found: {name}", kind="not_found"
    )
