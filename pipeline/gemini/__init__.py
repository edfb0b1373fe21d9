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

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.gemini.api_errors import (
        GeminiError,
        InvalidUsage,
        PermanentError,
        QuotaKind,
        TransientError,
        Unreachable,
        classify_429,
    )
    from pipeline.gemini.batch import BatchClient
    from pipeline.gemini.batch_wire import (
        JOB_STATE_CANCELLED,
        JOB_STATE_EXPIRED,
        JOB_STATE_PARTIALLY_SUCCEEDED,
        JOB_STATE_SUCCEEDED,
        TERMINAL_JOB_STATES,
        BatchJob,
        PartWriter,
        ResultLine,
        UploadedFile,
    )
    from pipeline.gemini.client import CallResult, GeminiClient
    from pipeline.gemini.embed import (
        DOCUMENT_TASK,
        EMBED_BATCH_MAX,
        QUERY_TASK,
        EmbeddingClient,
        batch_embed_body,
        estimated_tokens,
    )
    from pipeline.gemini.endpoint import (
        TOKEN_TIMEOUT_S,
        ConfigurationError,
        Endpoint,
        backend_from_env,
        credentials_file_problem,
        endpoint_for,
        vertex_place,
    )
    from pipeline.gemini.request import (
        ElasticsearchTool,
        GroundedRequestBuilder,
        PassagesRequestBuilder,
        RagStoreTool,
        grounding_tool,
        maps_tool_config,
    )
    from pipeline.gemini.session import SessionOwner
    from pipeline.gemini.tokens import estimate_tokens
    from pipeline.gemini.vertex_batch import VertexBatchClient
    from pipeline.gemini.vertex_batch_wire import parse_gs_uri
    from pipeline.gemini.wire import (
        Candidate,
        GenerateContentResponse,
        GroundingChunk,
        GroundingMetadata,
        GroundingSupport,
        MalformedResponse,
        MalformedUsage,
        Part,
        UsageMetadata,
        decode_error,
        decode_response,
        tool_part_count,
        usage_problem,
        visible_text,
    )
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "api_errors": (
                "GeminiError",
                "InvalidUsage",
                "PermanentError",
                "QuotaKind",
                "TransientError",
                "Unreachable",
                "classify_429",
            ),
            "batch": ("BatchClient",),
            "batch_wire": (
                "BatchJob",
                "JOB_STATE_CANCELLED",
                "JOB_STATE_EXPIRED",
                "JOB_STATE_PARTIALLY_SUCCEEDED",
                "JOB_STATE_SUCCEEDED",
                "TERMINAL_JOB_STATES",
                "PartWriter",
                "ResultLine",
                "UploadedFile",
            ),
            "client": (
                "CallResult",
                "GeminiClient",
            ),
            "embed": (
                "DOCUMENT_TASK",
                "EMBED_BATCH_MAX",
                "EmbeddingClient",
                "QUERY_TASK",
                "batch_embed_body",
                "estimated_tokens",
            ),
            "endpoint": (
                "ConfigurationError",
                "Endpoint",
                "TOKEN_TIMEOUT_S",
                "backend_from_env",
                "credentials_file_problem",
                "endpoint_for",
                "vertex_place",
            ),
            "request": (
                "ElasticsearchTool",
                "GroundedRequestBuilder",
                "PassagesRequestBuilder",
                "RagStoreTool",
                "grounding_tool",
                "maps_tool_config",
            ),
            "session": ("SessionOwner",),
            "tokens": ("estimate_tokens",),
            "vertex_batch": ("VertexBatchClient",),
            "vertex_batch_wire": ("parse_gs_uri",),
            "wire": (
                "Candidate",
                "GenerateContentResponse",
                "GroundingChunk",
                "GroundingMetadata",
                "GroundingSupport",
                "MalformedResponse",
                "MalformedUsage",
                "Part",
                "UsageMetadata",
                "decode_error",
                "decode_response",
                "tool_part_count",
                "usage_problem",
                "visible_text",
            ),
        },
        (),
    )

__all__ = [
    "DOCUMENT_TASK",
    "EMBED_BATCH_MAX",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
    "JOB_STATE_SUCCEEDED",
    "QUERY_TASK",
    "TERMINAL_JOB_STATES",
    "TOKEN_TIMEOUT_S",
    "BatchClient",
    "BatchJob",
    "CallResult",
    "Candidate",
    "ConfigurationError",
    "ElasticsearchTool",
    "EmbeddingClient",
    "Endpoint",
    "GeminiClient",
    "GeminiError",
    "GenerateContentResponse",
    "GroundedRequestBuilder",
    "GroundingChunk",
    "GroundingMetadata",
    "GroundingSupport",
    "InvalidUsage",
    "MalformedResponse",
    "MalformedUsage",
    "Part",
    "PartWriter",
    "PassagesRequestBuilder",
    "PermanentError",
    "QuotaKind",
    "RagStoreTool",
    "ResultLine",
    "SessionOwner",
    "TransientError",
    "Unreachable",
    "UploadedFile",
    "UsageMetadata",
    "VertexBatchClient",
    "backend_from_env",
    "batch_embed_body",
    "classify_429",
    "credentials_file_problem",
    "decode_error",
    "decode_response",
    "endpoint_for",
    "estimate_tokens",
    "estimated_tokens",
    "grounding_tool",
    "maps_tool_config",
    "parse_gs_uri",
    "tool_part_count",
    "usage_problem",
    "vertex_place",
    "visible_text",
]
