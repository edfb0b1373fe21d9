"""Vertex AI batch prediction, taking plain values only: Cloud Storage for the files
(:mod:`pipeline.gemini.storage`) and the ``batchPredictionJobs`` resource for the jobs. The
documents are :mod:`pipeline.gemini.vertex_batch_wire`, pure. Sources: docs/vertex-batch.md.

The verbs are those of the Developer API's :class:`pipeline.gemini.batch.BatchClient`, so the
batch runner drives either one the same way:

1. :meth:`VertexBatchClient.upload`: the JSONL part (lines from
   :meth:`VertexBatchClient.encode_line`, :func:`~pipeline.gemini.vertex_batch_wire.
   request_line`) to ``{gcs_input}/{display name}.jsonl``, skipped when that object already
   holds the same bytes (MD5): a rerun that died after the upload finds it and does not send
   it again. Answers the ``gs://`` URI and the MD5.
2. :meth:`VertexBatchClient.create`: ``POST /v1/projects/{p}/locations/{l}/batchPredictionJobs``
   with ``{displayName, model: "publishers/google/models/{m}", inputConfig: {instancesFormat:
   "jsonl", gcsSource: {uris}}, outputConfig: {predictionsFormat: "jsonl", gcsDestination:
   {outputUriPrefix: {gcs_output}/{display name}}}, labels}``; the answer is the job itself
   (its ``name`` is to be stored at once).
3. :meth:`VertexBatchClient.get` / :meth:`VertexBatchClient.list` /
   :meth:`VertexBatchClient.cancel`: ``GET /v1/{name}``, ``GET .../batchPredictionJobs?filter=``
   (AIP-160: ``display_name="..."``, ``labels.k="v"``), ``POST /v1/{name}:cancel``.
   :meth:`VertexBatchClient.find` looks a job up by display name, then by the ``ground-name``
   label every job gets (:meth:`find_by_label`): a create whose answer was lost is found, not
   made twice.
4. :meth:`VertexBatchClient.output_files` and :meth:`VertexBatchClient.download_lines`: the
   ``predictions*.jsonl`` objects under ``outputInfo.gcsOutputDirectory`` (or, before Vertex
   reports it, under the job's own output prefix), in name order, streamed line by line. Each
   line is parsed by :meth:`VertexBatchClient.parse_line`
   (:func:`~pipeline.gemini.vertex_batch_wire.parse_prediction_line`).
5. :meth:`VertexBatchClient.list_objects` / :meth:`VertexBatchClient.delete` (and
   :meth:`VertexBatchClient.leftovers`): what a batch left in the bucket (its input object,
   its output files), listed and removed once stored (:mod:`pipeline.batch.clean`).

Nothing here retries or sleeps: the runner polls with backoff. Errors are the HTTP tree of
:mod:`pipeline.gemini.api_errors` plus :class:`~pipeline.gemini.batch_wire.ProtocolError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from pipeline.gemini.batch_wire import BatchJob, ResultLine, UploadedFile
from pipeline.gemini.endpoint import Auth, vertex_base_url
from pipeline.gemini.session import Exchange, SessionOwner, listed, resource_path
from pipeline.gemini.storage import StorageClient, StoredObject
from pipeline.gemini.vertex_batch_wire import (
    ERRORS_FILE,
    PREDICTION_FILE,
    GcsPath,
    job_labels,
    label_value,
    parse_gs_uri,
    parse_prediction_job,
    parse_prediction_line,
    request_line,
)

__all__ = [
    "VertexBatchClient",
]

API_VERSION = "v1"
CONNECT_TIMEOUT_S = 10.0  # seconds
REQUEST_TIMEOUT_S = 120.0  # seconds for one create, get, list page or cancel
LIST_PAGE_SIZE = 100  # jobs per list page
INPUT_SUFFIX = ".jsonl"  # the input object's name: {gcs_input}/{display name}.jsonl
NAME_LABEL = "ground-name"  # the job label carrying its display name: a second handle to find it
JSONL_MIME = "application/jsonl"


class VertexBatchClient(SessionOwner):
    """Batch prediction in one project and location, reading and writing under two
    ``gs://`` prefixes. Use as an async context manager (it owns two sessions)."""

    __slots__ = ("_auth", "_base", "_input", "_output", "_parent", "storage")

    def __init__(
        self,
        auth: Auth,
        *,
        project: str,
        location: str,
        gcs_input: str,
        gcs_output: str,
        base_url: str | None = None,
        storage: StorageClient | None = None,
        storage_endpoint: str | None = None,
    ) -> None:
        if not project or not location:
            raise ValueError("Vertex batch prediction needs a project and a location")
        self._auth = auth
        self._base = (base_url or vertex_base_url(location)).rstrip("/")
        self._parent = f"projects/{project}/locations/{location}"
        self._input = parse_gs_uri(gcs_input)
        self._output = parse_gs_uri(gcs_output)
        self.storage = storage or StorageClient(auth, endpoint=storage_endpoint)
        super().__init__(
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            service="Vertex AI",
        )

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await super().__aexit__(*exc_info)
        finally:
            await self.storage.__aexit__(*exc_info)

    # -- where things go ---------------------------------------------------------------------

    def input_uri(self, display_name: str) -> str:
        """Where :meth:`upload` puts the part of batch ``display_name``."""
        return self._input.child(display_name + INPUT_SUFFIX).uri

    def output_uri_prefix(self, display_name: str) -> str:
        """The ``outputUriPrefix`` :meth:`create` gives batch ``display_name`` (its own
        directory, so one batch's listing never sees another's files)."""
        return self._output.child(display_name).uri

    # -- the documents -------------------------------------------------------------------------

    def encode_line(self, key: str, body: bytes) -> bytes:
        """An input line, keyed by a request label (:func:`.vertex_batch_wire.request_line`)."""
        return request_line(key, body)

    def parse_line(self, line: bytes) -> ResultLine:
        """An output line (:func:`~pipeline.gemini.vertex_batch_wire.parse_prediction_line`)."""
        return parse_prediction_line(line)

    # -- files ---------------------------------------------------------------------------------

    async def upload(self, path: Path, *, display_name: str) -> UploadedFile:
        """``path`` to :meth:`input_uri` (not again when the same bytes are there): its URI
        and MD5."""
        target = parse_gs_uri(self.input_uri(display_name))
        stored = await self.upload_object(path, target)
        return UploadedFile(target.uri, stored.md5_hash)

    async def upload_object(self, path: Path, target: GcsPath) -> StoredObject:
        """The upload itself, with what it found or sent (``uploaded`` says which)."""
        return await self.storage.upload(path, target.bucket, target.name, content_type=JSONL_MIME)

    async def output_files(self, results: BatchJob | str) -> list[str]:
        """The ``predictions*.jsonl`` (and ``errors*.jsonl``) URIs under a finished job's
        output directory (``results``: the directory, or the job), in name order: the order
        they are read in, so a resumed download skips the same lines."""
        if isinstance(results, BatchJob):
            results = results.responses_file or self.output_uri_prefix(results.display_name)
        where = parse_gs_uri(results)
        prefix = where.name + "/" if where.name else ""
        found = [
            obj.uri
            async for obj in self.storage.list(where.bucket, prefix)
            if PREDICTION_FILE.search(obj.name) or ERRORS_FILE.search(obj.name)
        ]
        return sorted(found)

    async def list_objects(self, prefix: str) -> list[str]:
        """Every object under ``prefix`` (``gs://bucket/dir``, taken as a directory)."""
        where = parse_gs_uri(prefix)
        under = where.name + "/" if where.name else ""
        return [obj.uri async for obj in self.storage.list(where.bucket, under)]

    async def download_lines(self, uri: str) -> AsyncIterator[bytes]:
        """The lines of an output file (``gs://...``), one at a time."""
        where = parse_gs_uri(uri)
        async for line in self.storage.download_lines(where.bucket, where.name):
            yield line

    async def leftovers(self, display_name: str) -> list[StoredObject]:
        """What batch ``display_name`` left in the bucket: its input and its output files."""
        found: list[StoredObject] = []
        source = parse_gs_uri(self.input_uri(display_name))
        stored = await self.storage.stat(source.bucket, source.name)
        if stored is not None:
            found.append(stored)
        out = parse_gs_uri(self.output_uri_prefix(display_name))
        found.extend([obj async for obj in self.storage.list(out.bucket, out.name + "/")])
        return found

    async def delete(self, uri: str) -> bool:
        """Remove one object; False when it was already gone."""
        where = parse_gs_uri(uri)
        return await self.storage.delete(where.bucket, where.name)

    # -- jobs ----------------------------------------------------------------------------------

    async def create(
        self,
        model: str,
        input_uri: str,
        *,
        display_name: str,
        labels: Mapping[str, str] | None = None,
    ) -> BatchJob:
        """Create a prediction job over an uploaded part; the job as the server describes it."""
        if not model.startswith("publishers/"):
            model = f"publishers/google/models/{model}"
        body: dict[str, Any] = {
            "displayName": display_name,
            "model": model,
            "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": [input_uri]}},
            "outputConfig": {
                "predictionsFormat": "jsonl",
                "gcsDestination": {"outputUriPrefix": self.output_uri_prefix(display_name)},
            },
        }
        handle = {NAME_LABEL: display_name.lower()} if _label_ok(display_name.lower()) else {}
        body["labels"] = job_labels({**handle, **(labels or {})})
        answer = await self._request("POST", self._jobs_url(), body=orjson.dumps(body))
        return parse_prediction_job(answer.json())

    async def get(self, name: str) -> BatchJob:
        job, _ = await self.get_document(name)
        return job

    async def get_document(self, name: str) -> tuple[BatchJob, dict[str, Any]]:
        """The job and its resource as sent (for fields :class:`BatchJob` does not keep)."""
        answer = await self._request("GET", f"{self._base}/{API_VERSION}/{resource_path(name)}")
        document = answer.json()
        return parse_prediction_job(document), document

    async def cancel(self, name: str) -> None:
        """Ask for cancellation (best effort: the job goes CANCELLING, then CANCELLED, unless
        it finished first; files already written stay)."""
        url = f"{self._base}/{API_VERSION}/{resource_path(name)}:cancel"
        await self._request("POST", url, body=b"{}")

    async def list(
        self, *, filter: str = "", page_size: int = LIST_PAGE_SIZE
    ) -> AsyncIterator[BatchJob]:
        """The location's jobs matching ``filter`` (AIP-160), page by page."""
        url = f"{self._jobs_url()}?pageSize={page_size}"
        if filter:
            url += f"&filter={quote(filter, safe='')}"
        async for item in listed(partial(self._request, "GET"), url, "batchPredictionJobs"):
            yield parse_prediction_job(item)

    async def find(self, display_name: str) -> BatchJob | None:
        """The job called ``display_name``, if there is one (names are unique per batch): by
        display name, else by the label :meth:`create` gave it."""
        async for job in self.list(filter=f'display_name="{_quoted(display_name)}"'):
            if job.display_name == display_name:
                return job
        label = display_name.lower()
        found = await self.find_by_label(NAME_LABEL, label) if _label_ok(label) else []
        return found[0] if found else None

    async def find_by_label(self, key: str, value: str) -> list[BatchJob]:
        """The jobs carrying label ``key=value``."""
        return [
            job
            async for job in self.list(filter=f'labels.{key}="{_quoted(value)}"')
            if job.labels.get(key) == value
        ]

    # -- one exchange --------------------------------------------------------------------------

    def _jobs_url(self) -> str:
        return f"{self._base}/{API_VERSION}/{self._parent}/batchPredictionJobs"

    async def _request(self, method: str, url: str, *, body: bytes | None = None) -> Exchange:
        headers = dict(await self._auth.headers())
        if body is not None:
            headers["content-type"] = "application/json"
        return await self._exchange(method, url, body=body, headers=headers)


def _label_ok(value: str) -> bool:
    try:
        label_value(value)
    except ValueError:
        return False
    return True


def _quoted(value: str) -> str:
    """A value inside a double-quoted AIP-160 string."""
    return value.replace("\\", "\\\\").replace('"', '\\"')
