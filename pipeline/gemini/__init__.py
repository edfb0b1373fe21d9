"""The API edge: everything that speaks Gemini's wire format, taking plain values only.

Nothing here reads a job file (``pipeline.job.calls`` turns the job's settings into the plain
values these modules take). The public surface, by module:

* ``endpoint``: :func:`endpoint_for` (backend, model -> URL and credentials), ``Endpoint``,
  ``ConfigurationError``; API keys and OAuth tokens live in request headers only;
* ``request``: :class:`GroundedRequestBuilder` and :func:`grounding_tool` (call 1's bodies);
* ``client``: :class:`GeminiClient` (one aiohttp session, bounded) and ``CallResult``;
* ``wire``: the response structs (msgspec), :func:`decode_response`, :func:`visible_text`;
* ``api_errors``: the HTTP branch of :class:`pipeline.errors.CallError` and :func:`classify_429`;
* ``batch``: the Batch API in file mode: :class:`BatchClient` (upload, create, get, list,
  cancel, download_lines);
* ``batch_wire``: its documents, pure: :class:`PartWriter` (the input
  file), :class:`BatchJob` and the ``JOB_STATE_*`` names, :func:`parse_result_line`;
* ``vertex_batch``: Vertex AI batch prediction, :class:`VertexBatchClient` (the same verbs
  over Cloud Storage and ``batchPredictionJobs``, plus output listing and cleanup);
* ``vertex_batch_wire``: its documents, pure: :func:`request_line` (the key in the request's
  labels), :func:`parse_prediction_job`, :func:`parse_prediction_line`, ``gs://`` URIs;
* ``storage``: the Cloud Storage JSON API subset, :class:`StorageClient` (upload by content
  hash, resumable; stat, list, download, delete) and :func:`storage_endpoint`.
"""
