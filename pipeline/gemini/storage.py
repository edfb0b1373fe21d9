"""The Cloud Storage edge: the five JSON API calls Vertex batch prediction needs, over
aiohttp with the credentials of :mod:`pipeline.gemini.endpoint` (docs/vertex-batch.md says
why not a storage library).

Calls (https://cloud.google.com/storage/docs/json_api/v1/objects):

* :meth:`StorageClient.stat`: ``objects.get`` (metadata: ``size``, ``md5Hash``, ``metadata``);
  404 is ``None``.
* :meth:`StorageClient.upload`: an object from a file, skipped when the bucket already holds
  that name with the same MD5 (``md5Hash``, base64, which Cloud Storage computes for every
  non-composite object): a rerun never uploads the same content twice. Small files go in one
  ``uploadType=multipart`` request; larger ones by the resumable protocol
  (https://cloud.google.com/storage/docs/performing-resumable-uploads): ``POST
  /upload/storage/v1/b/{bucket}/o?uploadType=resumable&name=...`` with the object's metadata
  (``md5Hash`` among it, so the server checks the bytes) answers a session URI in
  ``Location``; ``PUT`` chunks (multiples of 256 KiB) with ``Content-Range: bytes
  first-last/total``; ``308`` with ``Range: bytes=0-n`` means "go on from n + 1"; ``200``/``201``
  with the object resource ends it. A chunk that breaks off is not sent again blindly: a
  ``PUT`` with ``Content-Range: bytes */total`` asks how much arrived, and the upload goes on
  from there (it gives up after :data:`MAX_STALLS` chunks in a row that move it no further).
* :meth:`StorageClient.list`: ``objects.list`` with ``prefix``, page by page.
* :meth:`StorageClient.download_lines`: ``objects.get`` with ``alt=media``, streamed line by
  line (memory flat in the object's size).
* :meth:`StorageClient.delete`: ``objects.delete``; 404 is ``False``.

The endpoint is :func:`storage_endpoint`: ``[batch] gcs_endpoint``, else
``STORAGE_EMULATOR_HOST`` (a URL with its scheme, as googleapis/python-storage
``google/cloud/storage/_helpers.py`` reads it; a bare ``host:port`` gets ``http://``, as
talkiq/gcloud-aio ``storage/gcloud/aio/storage/storage.py`` does), else
``https://storage.googleapis.com``. Nothing else retries: the caller decides.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import anyio
import anyio.to_thread
import orjson

from pipeline.gemini.api_errors import ProtocolError, TransientError, Unreachable
from pipeline.gemini.endpoint import Auth
from pipeline.gemini.session import Exchange, SessionOwner, listed

STORAGE_API = "https://storage.googleapis.com"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
CHUNK_GRANULARITY = 256 * 1024  # bytes: resumable chunks are multiples of this
UPLOAD_CHUNK_BYTES = 32 * CHUNK_GRANULARITY  # bytes per resumable PUT (8 MiB)
MULTIPART_MAX_BYTES = 5 * 1024 * 1024  # bytes: smaller files go in one multipart request
HASH_READ_BYTES = 1024 * 1024  # bytes read at a time to hash a file
MAX_STALLS = 3  # chunks in a row that move the upload no further before it gives up
CONNECT_TIMEOUT_S = 10.0  # seconds
REQUEST_TIMEOUT_S = 300.0  # seconds for one request (one chunk, one page)
LIST_PAGE_SIZE = 1000  # objects per objects.list page
_RANGE = re.compile(r"bytes=0-(\d+)")


def storage_endpoint(configured: str = "", env: Mapping[str, str] | None = None) -> str:
    """The JSON API's base URL: ``configured``, else ``STORAGE_EMULATOR_HOST``, else Google."""
    env = os.environ if env is None else env
    chosen = configured or env.get(EMULATOR_ENV, "")
    if not chosen:
        return STORAGE_API
    if not chosen.startswith(("http://", "https://")):
        chosen = f"http://{chosen}"
    return chosen.rstrip("/")


def file_md5(path: Path) -> str:
    """The base64 MD5 of a file, as Cloud Storage reports ``md5Hash``."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_READ_BYTES):
            digest.update(chunk)
    return base64.b64encode(digest.digest()).decode()


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object as ``objects.get``/``list``/an upload describe it."""

    bucket: str
    name: str
    size: int = 0
    md5_hash: str | None = None
    generation: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    uploaded: bool = False  # True when this call sent the bytes (False: found in place)

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}"


def _object(document: Any, *, uploaded: bool = False) -> StoredObject:
    if not isinstance(document, dict) or not document.get("name") or not document.get("bucket"):
        raise ProtocolError("an object resource without a bucket or a name")
    meta = document.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    try:
        size = int(document.get("size") or 0)
    except (TypeError, ValueError):
        size = 0
    return StoredObject(
        bucket=str(document["bucket"]),
        name=str(document["name"]),
        size=size,
        md5_hash=document.get("md5Hash") or None,
        generation=str(document.get("generation") or ""),
        metadata={str(k): str(v) for k, v in meta.items()},
        uploaded=uploaded,
    )


class StorageClient(SessionOwner):
    """The JSON API of one endpoint, over its own aiohttp session. An async context manager."""

    __slots__ = ("_auth", "_base", "chunk_bytes", "multipart_max_bytes")

    def __init__(
        self,
        auth: Auth,
        *,
        endpoint: str | None = None,
        chunk_bytes: int = UPLOAD_CHUNK_BYTES,
        multipart_max_bytes: int = MULTIPART_MAX_BYTES,
    ) -> None:
        if chunk_bytes <= 0 or chunk_bytes % CHUNK_GRANULARITY:
            raise ValueError(f"chunk_bytes must be a positive multiple of {CHUNK_GRANULARITY}")
        self._auth = auth
        self._base = (endpoint or storage_endpoint()).rstrip("/")
        self.chunk_bytes = chunk_bytes
        self.multipart_max_bytes = multipart_max_bytes
        super().__init__(
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            service="Cloud Storage",
        )

    # -- metadata, list, delete ----------------------------------------------------------------

    async def stat(self, bucket: str, name: str) -> StoredObject | None:
        """The object's metadata, or None when there is no such object."""
        exchange = await self._request("GET", self._object_url(bucket, name), ok=(404,))
        return None if exchange.status == 404 else _object(exchange.json())

    async def list(self, bucket: str, prefix: str = "") -> AsyncIterator[StoredObject]:
        """Every object whose name starts with ``prefix``, in name order (the API's)."""
        url = f"{self._bucket_url(bucket)}/o?maxResults={LIST_PAGE_SIZE}"
        if prefix:
            url += f"&prefix={quote(prefix, safe='')}"
        async for item in listed(partial(self._request, "GET"), url, "items"):
            yield _object(item)

    async def delete(self, bucket: str, name: str) -> bool:
        """Remove the object; False when it was not there."""
        exchange = await self._request("DELETE", self._object_url(bucket, name), ok=(404,))
        return exchange.status != 404

    # -- download ------------------------------------------------------------------------------

    async def download_lines(self, bucket: str, name: str) -> AsyncIterator[bytes]:
        """The object's lines, one at a time, without the newline; blank lines skipped."""
        url = self._object_url(bucket, name) + "?alt=media"
        async for line in self._lines(url, await self._auth.headers()):
            yield line

    # -- upload --------------------------------------------------------------------------------

    async def upload(
        self,
        path: Path,
        bucket: str,
        name: str,
        *,
        content_type: str = "application/jsonl",
        metadata: Mapping[str, str] | None = None,
        md5: str | None = None,
    ) -> StoredObject:
        """``path`` as ``gs://bucket/name``, unless that object already holds the same bytes
        (same ``md5Hash``): then the object found, with ``uploaded`` False."""
        md5 = md5 or await anyio.to_thread.run_sync(file_md5, path)
        found = await self.stat(bucket, name)
        if found is not None and found.md5_hash == md5:
            return found
        size = (await anyio.Path(path).stat()).st_size
        resource: dict[str, Any] = {"name": name, "contentType": content_type, "md5Hash": md5}
        if metadata:
            resource["metadata"] = dict(metadata)
        if size <= self.multipart_max_bytes:
            data = await anyio.Path(path).read_bytes()
            return await self._upload_multipart(bucket, resource, data, content_type)
        return await self._upload_resumable(path, bucket, resource, size, content_type)

    async def _upload_multipart(
        self, bucket: str, resource: dict[str, Any], data: bytes, content_type: str
    ) -> StoredObject:
        boundary = "ground-" + secrets.token_hex(12)
        body = b"".join(
            (
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                orjson.dumps(resource),
                f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            )
        )
        url = f"{self._base}/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType=multipart"
        headers = {"content-type": f"multipart/related; boundary={boundary}"}
        exchange = await self._request("POST", url, body=body, headers=headers)
        return _object(exchange.json(), uploaded=True)

    async def _upload_resumable(
        self, path: Path, bucket: str, resource: dict[str, Any], size: int, content_type: str
    ) -> StoredObject:
        url = (
            f"{self._base}/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType=resumable"
            f"&name={quote(resource['name'], safe='')}"
        )
        headers = {
            "content-type": "application/json; charset=UTF-8",
            "x-upload-content-type": content_type,
            "x-upload-content-length": str(size),
        }
        body = orjson.dumps(resource)
        started = await self._request("POST", url, body=body, headers=headers)
        session = started.headers.get("location")
        if not session:
            raise ProtocolError("the resumable upload start answered without Location")
        offset, stalls = 0, 0
        async with await anyio.open_file(path, "rb") as handle:
            while True:
                await handle.seek(offset)
                chunk = await handle.read(self.chunk_bytes)
                end = offset + len(chunk) - 1
                span = f"bytes {offset}-{end}/{size}" if chunk else f"bytes */{size}"
                try:
                    exchange = await self._request(
                        "PUT", session, body=chunk, headers={"content-range": span}, ok=(308,)
                    )
                except (TransientError, Unreachable):
                    if stalls >= MAX_STALLS:
                        raise
                    exchange = await self._upload_status(session, size)
                if exchange.status in (200, 201):
                    return _object(exchange.json(), uploaded=True)
                received = _received(exchange.headers)
                if received > size:
                    raise ProtocolError("the server reports more bytes than were sent")
                stalls = stalls + 1 if received <= offset else 0
                if stalls > MAX_STALLS:
                    raise ProtocolError("the upload makes no progress")
                offset = received

    async def _upload_status(self, session: str, size: int) -> Exchange:
        """How much of the upload the server has (``308`` + ``Range``) or the finished object."""
        return await self._request(
            "PUT", session, body=b"", headers={"content-range": f"bytes */{size}"}, ok=(308,)
        )

    # -- one exchange --------------------------------------------------------------------------

    def _bucket_url(self, bucket: str) -> str:
        return f"{self._base}/storage/v1/b/{quote(bucket, safe='')}"

    def _object_url(self, bucket: str, name: str) -> str:
        return f"{self._bucket_url(bucket)}/o/{quote(name, safe='')}"

    async def _request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        ok: tuple[int, ...] = (),
    ) -> Exchange:
        merged = {**(await self._auth.headers()), **(headers or {})}
        return await self._exchange(method, url, body=body, headers=merged, ok=ok, redirects=False)


def _received(answer: Mapping[str, str]) -> int:
    """The next offset a ``308`` names: one past ``Range: bytes=0-n``, 0 without ``Range``."""
    found = _RANGE.match(answer.get("range", ""))
    return int(found.group(1)) + 1 if found else 0
