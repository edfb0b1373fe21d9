"""A Cloud Storage JSON API subset, as the emulator serves it (what Vertex batch needs).

Routes (wired in :mod:`pipeline.emulator.server`; shapes from
https://cloud.google.com/storage/docs/json_api/v1/objects and
https://cloud.google.com/storage/docs/performing-resumable-uploads):

* ``POST /upload/storage/v1/b/{bucket}/o?uploadType=resumable[&name=]``: the object's
  metadata as JSON (``name``, ``contentType``, ``md5Hash``, ``metadata``); answers ``200``
  with the session URI in ``Location`` (``...&upload_id=``).
* ``PUT`` on the session URI with ``Content-Range: bytes a-b/total`` (``total`` may be
  ``*`` until the last chunk): a chunk that is not the last keeps only a multiple of 256 KiB,
  as Google does, and answers ``308`` with ``Range: bytes=0-n``; the last answers ``200``
  with the object resource. ``Content-Range: bytes */total`` with no body asks how much
  arrived (``308``, or ``200`` once done). An ``md5Hash`` that does not match is a 400.
* ``POST ...?uploadType=multipart``: ``multipart/related``, metadata then bytes.
  ``uploadType=media`` takes the bytes with ``name`` in the query.
* ``GET /storage/v1/b/{bucket}/o/{object}`` (metadata) and ``?alt=media`` (bytes; also at
  ``/download/storage/v1/...``), ``GET /storage/v1/b/{bucket}/o?prefix=&pageToken=`` (list),
  ``DELETE /storage/v1/b/{bucket}/o/{object}``.

Buckets spring into being on first write. Objects are bytes, or *generated* (a prediction
job's output, :mod:`pipeline.emulator.prediction`): those are made line by line, once, the
first time anything asks for them (a listing, a get, a download), into a temporary file that
gives their ``size`` and ``md5Hash`` and serves every download, so memory stays flat in their
size. ``crc32c`` is not sent (no checksum library here).

Faults: ``storage_chunk_503_share`` of resumable chunks keep half of what they carried and
answer 503, so a client has to ask how much arrived and go on from there. Tests can hold a
step (:meth:`StorageService.hold`): ``upload`` (the object stored, its answer not sent) and
``download`` (half the lines sent; optionally only from the n-th output file on); ``arrived``
counts the held requests.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import quote

import orjson
from aiohttp import web

from pipeline.emulator import draws
from pipeline.emulator.clock import Clock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.gates import StageGates

STAGES = ("upload", "download")
GRANULARITY = 256 * 1024  # bytes: a non-final resumable chunk keeps a multiple of this
PAGE_SIZE = 1000  # objects per list page by default
WRITE_LINES = 256  # generated lines per write to a download stream
_JSON = "application/json; charset=UTF-8"
_CHUNK_503 = b"storage-chunk-503"
_CONTENT_RANGE = re.compile(r"^bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)$")

LineSource = Callable[[], Iterator[bytes]]  # a generated object's lines, each with "\n"


def _rfc3339(seconds: float) -> str:
    """``2026-12-01T10:00:00.123Z`` (milliseconds, as Cloud Storage writes them)."""
    text = dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return text[:-3] + "Z"


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


class StorageError(Exception):
    """A JSON API error: ``{"error": {"code", "message", "errors": [{...reason}]}}``."""

    def __init__(self, code: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason

    def body(self) -> bytes:
        item = {"message": self.message, "domain": "global", "reason": self.reason}
        error = {"code": self.code, "message": self.message, "errors": [item]}
        return orjson.dumps({"error": error})


def _not_found(bucket: str, name: str) -> StorageError:
    return StorageError(404, f"No such object: {bucket}/{name}", "notFound")


def _bad(message: str) -> StorageError:
    return StorageError(400, message, "invalid")


@dataclass(slots=True)
class _Object:
    bucket: str
    name: str
    content_type: str
    created: float
    generation: int
    metadata: dict[str, str]
    data: bytes | None = None  # stored bytes; None for a generated object
    source: LineSource | None = None
    size: int | None = None
    md5: str | None = None
    lines: int | None = None  # a generated object's line count (where a download is held)
    spool: IO[bytes] | None = None  # a generated object, made once

    def measure(self) -> None:
        """Size and MD5; a generated object is made here, once, into its spool file."""
        if self.size is not None:
            return
        if self.data is not None:
            self.size, self.md5 = len(self.data), _md5(self.data)
            return
        assert self.source is not None
        spool = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the object
        digest, size = hashlib.md5(usedforsecurity=False), 0
        for line in self.source():
            spool.write(line)
            digest.update(line)
            size += len(line)
        self.spool = spool
        self.size, self.md5 = size, base64.b64encode(digest.digest()).decode()

    def resource(self, base_url: str) -> dict[str, Any]:
        self.measure()
        quoted = quote(self.name, safe="")
        doc: dict[str, Any] = {
            "kind": "storage#object",
            "id": f"{self.bucket}/{self.name}/{self.generation}",
            "selfLink": f"{base_url}/storage/v1/b/{self.bucket}/o/{quoted}",
            "mediaLink": f"{base_url}/download/storage/v1/b/{self.bucket}/o/{quoted}"
            f"?generation={self.generation}&alt=media",
            "name": self.name,
            "bucket": self.bucket,
            "generation": str(self.generation),
            "metageneration": "1",
            "contentType": self.content_type,
            "storageClass": "STANDARD",
            "size": str(self.size),
            "md5Hash": self.md5,
            "etag": base64.b64encode(self.generation.to_bytes(8, "big")).decode().rstrip("="),
            "timeCreated": _rfc3339(self.created),
            "updated": _rfc3339(self.created),
        }
        if self.metadata:
            doc["metadata"] = dict(self.metadata)
        return doc


@dataclass(slots=True)
class _Session:
    bucket: str
    name: str
    content_type: str
    total: int | None
    md5: str | None
    metadata: dict[str, str]
    data: bytearray = field(default_factory=bytearray)
    done: _Object | None = None
    chunks: int = 0  # chunks received (a fault draw is keyed by it, so a resend can pass)


class StorageService(StageGates):
    """The emulator's buckets (one per :class:`~pipeline.emulator.server.Emulator`).

    ``before_read`` runs before any read (the prediction jobs publish the outputs that are
    due, so a listing always sees what the clock says exists)."""

    def __init__(self, config: EmulatorConfig, clock: Clock, seed_key: bytes) -> None:
        super().__init__(STAGES)
        self.config = config
        self.clock = clock
        self.seed_key = seed_key
        self.objects: dict[tuple[str, str], _Object] = {}
        self.sessions: dict[str, _Session] = {}
        self.counts: Counter[str] = Counter()
        self.before_read: Callable[[], None] = lambda: None
        self._generation = int(clock.time() * 1_000_000)

    def snapshot(self) -> dict[str, int]:
        base = dict.fromkeys(("objects_uploaded", "uploads_started", "objects_deleted"), 0)
        return {
            **base,
            **self.counts,
            "objects": len(self.objects),
            **self.held(),
        }

    # --- the store, for the prediction jobs -------------------------------------------

    def put(
        self,
        bucket: str,
        name: str,
        *,
        data: bytes | None = None,
        source: LineSource | None = None,
        content_type: str = "application/jsonl",
        metadata: dict[str, str] | None = None,
        lines: int | None = None,
    ) -> _Object:
        self._generation += 1
        obj = _Object(
            bucket,
            name,
            content_type,
            self.clock.time(),
            self._generation,
            dict(metadata or {}),
            data=data,
            source=source,
            lines=lines,
        )
        self.objects[(bucket, name)] = obj
        return obj

    def read(self, bucket: str, name: str) -> bytes | None:
        obj = self.objects.get((bucket, name))
        if obj is None:
            return None
        if obj.data is not None:
            return obj.data
        obj.measure()
        assert obj.spool is not None
        obj.spool.seek(0)
        return obj.spool.read()

    # --- uploads ------------------------------------------------------------------------

    async def upload_start(self, request: web.Request) -> web.Response:
        bucket = request.match_info["bucket"]
        kind = request.query.get("uploadType", "")
        if kind == "resumable" and "upload_id" not in request.query:
            return await self._start_session(request, bucket)
        if kind == "multipart":
            return await self._multipart(request, bucket)
        if kind == "media":
            name = request.query.get("name", "")
            if not name:
                raise _bad("Required parameter: name")
            data = await request.read()
            return self._finish(request, bucket, name, data, request.content_type, None, {})
        raise _bad(f"Unsupported uploadType {kind!r}.")

    async def _start_session(self, request: web.Request, bucket: str) -> web.Response:
        raw = await request.read()
        try:
            meta = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            raise _bad("Invalid JSON payload.") from None
        if not isinstance(meta, dict):
            raise _bad("Invalid JSON payload.")
        name = request.query.get("name") or meta.get("name") or ""
        if not name:
            raise _bad("Required parameter: name")
        length = request.headers.get("X-Upload-Content-Length")
        # From the seed, not the OS: every draw keyed by a session is the same in every run.
        number = len(self.sessions).to_bytes(8, "big")
        upload_id = hashlib.blake2b(b"upload" + number, key=self.seed_key[:64]).hexdigest()[:24]
        self.sessions[upload_id] = _Session(
            bucket=bucket,
            name=name,
            content_type=request.headers.get("X-Upload-Content-Type")
            or meta.get("contentType")
            or "application/octet-stream",
            total=int(length) if length and length.isdigit() else None,
            md5=meta.get("md5Hash"),
            metadata={str(k): str(v) for k, v in (meta.get("metadata") or {}).items()},
        )
        self.counts["uploads_started"] += 1
        location = (
            f"{request.scheme}://{request.host}/upload/storage/v1/b/{bucket}/o"
            f"?uploadType=resumable&name={quote(name, safe='')}&upload_id={upload_id}"
        )
        return web.Response(status=200, headers={"Location": location, "Content-Length": "0"})

    async def upload_chunk(self, request: web.Request) -> web.Response:
        upload_id = request.query.get("upload_id", "")
        session = self.sessions.get(upload_id)
        if session is None:
            raise StorageError(404, "No such upload session.", "notFound")
        found = _CONTENT_RANGE.match(request.headers.get("Content-Range", "").strip())
        if found is None:
            raise _bad("Invalid Content-Range header.")
        first, last, total_text = found.groups()
        body = await request.read()
        if total_text != "*":
            session.total = int(total_text)
        if session.done is not None:
            return self._object_response(request, session.done)
        if first is None:  # a status query
            return self._progress(session)
        start, end = int(first), int(last)
        if end - start + 1 != len(body):
            raise _bad("Content-Range does not match the body's length.")
        received = len(session.data)
        if start > received:
            raise _bad(f"Chunk starts at {start}; {received} bytes were received.")
        body = body[received - start :]  # bytes sent again are ignored
        final = session.total is not None and start + (end - start + 1) >= session.total
        self.counts["upload_chunks"] += 1
        session.chunks += 1
        draw = draws.unit(self.seed_key, _CHUNK_503, f"{upload_id}:{session.chunks}".encode())
        if not final and draw < self.config.storage_chunk_503_share:
            keep = (len(body) // 2) // GRANULARITY * GRANULARITY
            session.data += body[:keep]
            self.counts["chunk_503"] += 1
            raise StorageError(503, "Backend Error", "backendError")
        if not final:
            keep = len(body) // GRANULARITY * GRANULARITY
            session.data += body[:keep]
            return self._progress(session)
        session.data += body
        if len(session.data) != session.total:
            raise _bad(f"Upload ended at {len(session.data)} bytes, {session.total} announced.")
        response = self._finish(
            request,
            session.bucket,
            session.name,
            bytes(session.data),
            session.content_type,
            session.md5,
            session.metadata,
        )
        session.done = self.objects[(session.bucket, session.name)]
        await self._gate("upload")
        return response

    def _progress(self, session: _Session) -> web.Response:
        headers = {"Content-Length": "0"}
        if session.data:
            headers["Range"] = f"bytes=0-{len(session.data) - 1}"
        return web.Response(status=308, headers=headers)

    async def _multipart(self, request: web.Request, bucket: str) -> web.Response:
        reader = await request.multipart()
        meta: dict[str, Any] = {}
        data: bytes | None = None
        content_type = "application/octet-stream"
        index = 0
        while (part := await reader.next()) is not None:
            raw = await part.read()  # type: ignore[union-attr]
            if index == 0:
                try:
                    meta = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    raise _bad("The first part must be the object's JSON metadata.") from None
            else:
                data = bytes(raw)
                content_type = part.headers.get("Content-Type", content_type)  # type: ignore[union-attr]
            index += 1
        if data is None or not isinstance(meta, dict) or not meta.get("name"):
            raise _bad("A multipart upload takes the metadata (with name), then the bytes.")
        self.counts["multipart_uploads"] += 1
        response = self._finish(
            request,
            bucket,
            str(meta["name"]),
            data,
            str(meta.get("contentType") or content_type),
            meta.get("md5Hash"),
            {str(k): str(v) for k, v in (meta.get("metadata") or {}).items()},
        )
        await self._gate("upload")
        return response

    def _finish(
        self,
        request: web.Request,
        bucket: str,
        name: str,
        data: bytes,
        content_type: str,
        md5: str | None,
        metadata: dict[str, str],
    ) -> web.Response:
        if md5 is not None and md5 != _md5(data):
            raise _bad("Provided MD5 hash does not match the calculated MD5 hash.")
        obj = self.put(bucket, name, data=data, content_type=content_type, metadata=metadata)
        self.counts["objects_uploaded"] += 1
        self.counts["bytes_uploaded"] += len(data)
        return self._object_response(request, obj)

    def _object_response(self, request: web.Request, obj: _Object) -> web.Response:
        body = orjson.dumps(obj.resource(f"{request.scheme}://{request.host}"))
        return web.Response(body=body, headers={"Content-Type": _JSON})

    # --- reads, list, delete ------------------------------------------------------------

    async def object_get(self, request: web.Request) -> web.StreamResponse:
        self.before_read()
        bucket, name = request.match_info["bucket"], request.match_info["name"]
        obj = self.objects.get((bucket, name))
        if obj is None:
            raise _not_found(bucket, name)
        if request.query.get("alt") == "media" or request.path.startswith("/download/"):
            return await self._media(request, obj)
        return self._object_response(request, obj)

    async def _media(self, request: web.Request, obj: _Object) -> web.StreamResponse:
        self.counts["downloads"] += 1
        if obj.data is not None:
            return web.Response(body=obj.data, headers={"Content-Type": obj.content_type})
        obj.measure()
        assert obj.spool is not None
        obj.spool.seek(0)
        response = web.StreamResponse(headers={"Content-Type": obj.content_type})
        await response.prepare(request)
        half = (obj.lines or 0) // 2
        out: list[bytes] = []
        for index, line in enumerate(obj.spool):  # read from the spool: memory stays flat
            if index == half and out:
                await response.write(b"".join(out))
                out.clear()
                await self._gate("download")
            out.append(line)
            if len(out) >= WRITE_LINES:
                await response.write(b"".join(out))
                out.clear()
        if out:
            await response.write(b"".join(out))
        await response.write_eof()
        return response

    async def list(self, request: web.Request) -> web.Response:
        self.before_read()
        bucket = request.match_info["bucket"]
        prefix = request.query.get("prefix", "")
        size = int(request.query.get("maxResults") or PAGE_SIZE)
        start = request.query.get("pageToken", "")
        names = sorted(n for (b, n) in self.objects if b == bucket and n.startswith(prefix))
        if start:
            names = [n for n in names if n >= start]
        page, rest = names[:size], names[size:]
        base = f"{request.scheme}://{request.host}"
        body: dict[str, Any] = {"kind": "storage#objects"}
        if page:
            body["items"] = [self.objects[(bucket, n)].resource(base) for n in page]
        if rest:
            body["nextPageToken"] = rest[0]
        self.counts["lists"] += 1
        return web.Response(body=orjson.dumps(body), headers={"Content-Type": _JSON})

    async def delete(self, request: web.Request) -> web.Response:
        self.before_read()
        bucket, name = request.match_info["bucket"], request.match_info["name"]
        removed = self.objects.pop((bucket, name), None)
        if removed is None:
            raise _not_found(bucket, name)
        if removed.spool is not None:
            removed.spool.close()
        self.counts["objects_deleted"] += 1
        return web.Response(status=204)
