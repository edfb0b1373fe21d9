"""The job file's sections: one frozen struct per TOML table, with its keys' types, defaults
and per-key limits; :class:`RawJob` is the whole file as decoded.

What one key cannot say alone (a tool that needs another backend, a schema file that must
parse) is checked after decoding, by :func:`pipeline.job.spec.load_jobspec`. Unknown keys are
errors: every section forbids them. A key of a feature the job leaves off (a tool's keys with
the tool not declared) is ignored, with a note (:mod:`pipeline.job.switched_off`).
"""

from __future__ import annotations

from typing import Annotated, Literal, dataclass_transform

import msgspec

from pipeline.job.states import TERMINAL_STATES, QuestionState

__all__ = [
    "DEFAULT_MODEL",
    "MAX_SECONDS",
    "BatchSection",
    "CanarySection",
    "NotifySection",
    "RawJob",
    "ResolverSection",
    "RetrievalSection",
    "Seconds",
    "SourceSection",
    "ToolName",
]

DEFAULT_REDIRECT_HOSTS = ("vertexaisearch.cloud.google.com",)
# [model] name's default: a GA Flash model priced on both backends (pipeline/costs/models.toml,
# prices.toml), not a preview; docs/guides/changing-models.md says why.
DEFAULT_MODEL = "gemini-3.8-flash"
DEFAULT_MAX_QUESTION_CHARS = 1_000_000  # see LimitsSection.max_question_chars

# The largest value each kind of key takes. A number past these is a typo or a unit mistake,
# and past some of them the arithmetic breaks (a date past the year 9999, a micro-dollar count
# past 64 bits, a million tasks started at once). Non-finite numbers (inf, nan) are refused
# before these are checked (pipeline.job.spec).
MAX_SECONDS = 7 * 86_400.0  # seconds: the longest timeout, lease, poll or outage (a week)
MAX_BUDGET_USD = 1_000_000_000.0  # USD: a billion; its micro-dollars stay far inside 64 bits
MAX_REQUESTS_PER_MINUTE = 10_000_000  # requests a minute: far above any Gemini quota
MAX_TOKENS_PER_MINUTE = 10_000_000_000  # input tokens a minute: likewise
MAX_PER_DAY = 1_000_000_000  # grounded prompts a day
# Calls in flight in one process. Each holds a connection (a file descriptor) and a task; by
# Little's law 10,000 in flight carry 60,000 requests a minute at 10 s a call, above what one
# process drives (see docs/guides/capacity.md). More: more processes (`ground worker`). The
# machine's own ceiling (open files, `ulimit -n`) is checked at load too (pipeline.job.capacity).
MAX_CONCURRENCY = 10_000  # calls in flight
MAX_ATTEMPTS = 100  # attempts (or retries) of one call
MAX_OUTPUT_TOKENS = 1_048_576  # tokens: above every Gemini model's output limit
MAX_SEARCH_QUERIES = 1_000  # search queries a grounded call may run
MAX_TOOL_USE_TOKENS = 10_000_000  # tokens of search results a call may read
MAX_QUESTION_CHARS = 10_000_000  # characters: past any model's input at 1 token a character
MAX_LOOKUPS_PER_SECOND = 100_000.0  # redirect lookups a second
MAX_BATCH_REQUESTS = 10_000_000  # requests in one batch file

Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_SECONDS)]
FieldName = Annotated[str, msgspec.Meta(min_length=1)]

# The terminal states other than `done`: those `[job] fail_on` may name.
FAIL_ON_STATES = tuple(
    str(s) for s in QuestionState if s in TERMINAL_STATES and s != QuestionState.DONE
)
# Lost links `[job] fail_on` may name: a share of the job's sources above
# `fail_on_sources_lost` in that resolution state fails a finished run too.
FAIL_ON_SOURCES = ("sources_expired", "sources_rejected")


# msgspec's subclasses inherit ``frozen`` and ``kw_only``; a type checker, going by
# dataclass_transform's rules, would not know it without these defaults.
@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(msgspec.field,))
class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every section: immutable, unknown keys rejected."""


class JobSection(_Section):
    # The job's name: its questions, answers and spend are kept under it, so several jobs can
    # share one database.
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    # SQLAlchemy-style URL; "sqlite:///relative/path.sqlite" is relative to the job file.
    database: str = "sqlite:///ground.sqlite"
    # The question states that make a finished run exit 3 (see pipeline.exit_codes); any of
    # FAIL_ON_STATES, and FAIL_ON_SOURCES (lost links, over the share below).
    fail_on: tuple[str, ...] = ("failed", "invalid")
    # The share of the job's sources (those with a link) that may be expired, or rejected,
    # before a `sources_expired` / `sources_rejected` in fail_on fails the run.
    fail_on_sources_lost: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.05
    # Seconds the database may stay unreachable (a restart, a failover) or locked by another
    # session (a migration, a LOCK, a long ALTER) before a run, `ground index` or the opening
    # of the database gives up; what a run paid for is then kept in its spill file.
    database_outage_s: Seconds = 300.0
    # Where a run keeps the paid responses its database could not take (a spill file per job
    # and database, stored by the next run): empty = $XDG_STATE_HOME/ground, else
    # ~/.local/state/ground. Best on another file system than the database. Relative paths
    # are relative to the job file.
    state_dir: str = ""
    # Reuse a stored answer to the same question text under the same model, tools and prompt
    # settings (in this job or another of the database) younger than this ("7d"); "" = off.
    reuse_answers_within: str = ""
    # Billing labels sent on every Vertex request beside ground_job, ground_step and
    # ground_run, as key = "value" (Google's rules: lower-case letters, digits, '_' and '-',
    # at most 63 characters, a key starting with a letter); the Developer API takes none.
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class SourceSection(_Section):
    # The questions come from a file (CSV / JSONL) or from a query: exactly one of the two.
    file: str = ""
    # A SELECT run on the database at ``url`` (any SQLAlchemy URL; sqlite:///FILE is relative
    # to the job file); its columns are read like a file's fields.
    query: str = ""
    url: str = ""
    # The question file's format: "auto" = CSV for a .csv file, JSONL for any other.
    format: Literal["auto", "jsonl", "csv"] = "auto"
    # The field (JSONL) or column (CSV) that holds each question's own id: a question is keyed
    # by it, never by its text.
    id_field: FieldName = "id"
    # The field or column that holds the question's text.
    text_field: FieldName = "question"
    # The field or column that holds the question's class (the figures per class, `--class`,
    # fallback_classes); unset = no class.
    class_field: str | None = None
    # Extra input fields kept with each question (JSON object); empty = none.
    metadata_fields: tuple[str, ...] = ()
    # A question whose text changed for an id already loaded: "refuse" loads nothing and names
    # the ids; "keep" keeps the stored question and its answers; "reask" stores the new text
    # and asks it again (the old answer kept as the version before, with the text it answered).
    on_change: Literal["refuse", "keep", "reask"] = "refuse"


class ModelSection(_Section):
    # Left out: GOOGLE_GENAI_USE_VERTEXAI (or GOOGLE_GENAI_USE_ENTERPRISE) = true / 1 chooses
    # "vertex", as Google's SDK does (pipeline.gemini.endpoint.backend_from_env); else developer.
    backend: Literal["developer", "vertex"] = "developer"
    # The model id, stored with every call (the ledger's model column is 100 characters
    # wide). The default is a current GA Flash model on both backends (`ground models` lists
    # the table: status, shutdown, replacement, prices). A shut-down model is refused at load
    # (exit 2), a preview or a model within 60 days of its shutdown is loaded with a warning.
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=100)] = DEFAULT_MODEL
    # Empty = Google's endpoint for the backend; set it to point at the emulator.
    base_url: str = ""
    # Sampling: sent only when set. Gemini 3 deprecates temperature, top_p and top_k (Google's
    # Gemini 3 migration guide: leave them out); setting one for such a model warns at load.
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=1, le=1000)] | None = None
    # How hard the model thinks, for call 1 and call 2 alike; "" = the model's default. Gemini
    # 3 and later take it as generationConfig.thinkingConfig.thinkingLevel; Gemini 2.5 as a
    # thinkingBudget in tokens (minimal 0, or 128 on Pro; low 1024; medium 8192; high 24576);
    # never both.
    thinking: Literal["", "minimal", "low", "medium", "high"] = ""
    # Sent as call 1's systemInstruction; "" = none.
    system_instruction: str = ""
    # Must contain "{question}"; other placeholders are not expanded.
    prompt_template: str = "{question}"
    # Seconds one call may take before it is abandoned (and retried, as a timeout); a stop
    # drains the calls in flight for at most this long.
    request_timeout_s: Seconds = 120.0
    # Vertex only: defaults come from GOOGLE_CLOUD_PROJECT / GOOGLE_CLOUD_LOCATION (then global).
    project: str = ""
    # Vertex only: the location ("us-central1", "global"); see project.
    location: str = ""
    # "online": one generateContent per question. "batch": the Gemini Batch API, or Vertex
    # batch prediction through Cloud Storage ([batch] gcs_input, gcs_output): half the token
    # price, results within 24 h; see [batch] and pipeline.batch.runner.
    mode: Literal["online", "batch"] = "online"
    # Which Gemini API answers: "generate_content" (models/MODEL:generateContent) or
    # "interactions" (POST /v1beta/interactions, store = false, each question alone). Answers,
    # sources, supports and costs are stored alike; Developer API and online mode only.
    api: Literal["generate_content", "interactions"] = "generate_content"


ToolName = Literal[
    "google_search",
    "enterprise_web_search",
    "vertex_ai_search",
    "file_search",
    "url_context",
    "google_maps",
    "google_search_retrieval",
    "elasticsearch",
    "vertex_rag_store",
]


class GroundingSection(_Section):
    # One tool name or a list of them (several at once where the API allows).
    tool: ToolName | tuple[ToolName, ...] = "google_search"
    # true: an answer without groundingMetadata is asked again with a recency nudge, up to
    # ungrounded_retries times, then kept as `ungrounded` (never presented as grounded).
    required: bool = False
    ungrounded_retries: Annotated[int, msgspec.Meta(ge=0, le=MAX_ATTEMPTS)] = 2
    # vertex_ai_search: the full path, checked at load (pipeline.job.datastore):
    # projects/P/locations/global/collections/default_collection/dataStores/ID, or an engine
    # (.../collections/C/engines/ID); a location other than global is loaded with a warning
    datastore: str = ""
    engine: str = ""
    # vertex_ai_search: a filter expression on the data store's documents; "" = none.
    filter: str = ""
    max_results: Annotated[int, msgspec.Meta(ge=0, le=10)] = 0  # 0 = the API's default (10)
    # google_search / enterprise_web_search on Vertex: domains left out of the search
    exclude_domains: tuple[str, ...] = ()
    # file_search: fileSearchStores/... names (Developer API File Search stores)
    file_search_stores: tuple[str, ...] = ()
    # url_context: the source field (listed in source.metadata_fields) holding the URL(s)
    url_field: str = ""
    # google_maps: optional [latitude, longitude], sent as toolConfig.retrievalConfig.latLng
    location: tuple[float, ...] = ()
    # google_maps: send googleMaps.enableWidget, so answers carry googleMapsWidgetContextToken
    # (stored and exported as maps_widget_token, to render the Places widget)
    maps_widget: bool = False
    # google_search_retrieval (Gemini 1.5 only): search only when the model's predicted score
    # reaches this (MODE_DYNAMIC); 0 = always search
    dynamic_threshold: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    # elasticsearch (Vertex, retrieval.externalApi): the cluster's endpoint, the index and the
    # search template to run, hits per query (0 = the template's own), and the name of the
    # environment variable holding the API key (read when the call is made, never stored).
    elasticsearch_endpoint: str = ""
    # elasticsearch: the index searched.
    elasticsearch_index: str = ""
    # elasticsearch: the search template run on the index.
    elasticsearch_search_template: str = ""
    # elasticsearch: hits per query; 0 = the template's own.
    elasticsearch_num_hits: Annotated[int, msgspec.Meta(ge=0, le=100)] = 0
    # elasticsearch: the environment variable that holds the cluster's API key (read when
    # the call is made, never stored nor printed).
    elasticsearch_api_key_env: str = ""
    # vertex_rag_store (Vertex RAG Engine, retrieval.vertexRagStore): the corpus
    # (projects/P/locations/L/ragCorpora/C), optionally some of its files, contexts to
    # retrieve (0 = the API's default) and a vector-distance cut-off (0 = none).
    rag_corpus: str = ""
    # vertex_rag_store: only these files of the corpus; empty = all of them.
    rag_file_ids: tuple[str, ...] = ()
    # vertex_rag_store: contexts retrieved per query; 0 = the API's default.
    rag_top_k: Annotated[int, msgspec.Meta(ge=0, le=100)] = 0
    # vertex_rag_store: contexts farther than this vector distance are left out; 0 = none.
    rag_vector_distance_threshold: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    # Own retrieval ([retrieval]) where managed grounding fails: "own_retrieval" turns it on.
    # fallback_classes go straight to it; fallback_when = "ungrounded" asks an answer that is
    # still ungrounded (or grounded with no chunks) after its retries again through it;
    # fallback_below (a grounded rate, 0..1) names the classes below it in `status --by class`.
    fallback: Literal["", "own_retrieval"] = ""
    fallback_classes: tuple[str, ...] = ()
    fallback_when: Literal["", "ungrounded"] = ""
    fallback_below: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0

    @property
    def tools(self) -> tuple[str, ...]:
        """The declared tools, in the file's order."""
        return (self.tool,) if isinstance(self.tool, str) else tuple(self.tool)

    @property
    def lat_lng(self) -> tuple[float, float] | None:
        return (self.location[0], self.location[1]) if len(self.location) == 2 else None


class RetrievalSection(_Section):
    """The job's own index (``ground index``) and how it is searched (own retrieval)."""

    # The documents: a JSONL or CSV file (fields id, title, uri, text; any other field is kept
    # as the document's metadata), or a SELECT on the database at url with those columns.
    docs: str = ""
    # A SELECT run on the database at url instead of docs; its columns are read like the file's.
    query: str = ""
    url: str = ""
    # The documents file's format: "auto" = CSV for a .csv file, JSONL for any other.
    format: Literal["auto", "jsonl", "csv"] = "auto"
    # Chunks of at most chunk_chars characters, cut on paragraph and sentence boundaries,
    # repeating at most chunk_overlap characters of the chunk before.
    chunk_chars: Annotated[int, msgspec.Meta(ge=100, le=100_000)] = 1_200
    chunk_overlap: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 150
    # Passages given to the model per question, and the lexical score (0..1, higher is
    # closer) below which a chunk does not count: none left is "nothing relevant found".
    top_k: Annotated[int, msgspec.Meta(ge=1, le=50)] = 5
    # The lexical score (0..1) a chunk needs to count; see top_k.
    min_score: Annotated[float, msgspec.Meta(ge=0, lt=1)] = 0.0
    # Dense vectors (Gemini embeddings, billed in the ledger as step "embed") fused with the
    # lexical ranks (RRF): the chunks embedded by `ground index`, each own-routed question by
    # `ground run`; searched with sqlite-vec / pgvector, else by scanning the stored vectors.
    dense: bool = False
    # The embedding model of dense retrieval (dense = true), for chunks and questions alike.
    embedding_model: str = "gemini-embedding-001"
    embedding_dimensions: Annotated[int, msgspec.Meta(ge=0, le=3072)] = 768  # 0 = model's own

    @property
    def configured(self) -> bool:
        return bool(self.docs or self.query)


class LimitsSection(_Section):
    # Model requests a minute, shared by every process of the job through its database: set
    # it to your project's quota (the runs pace just under it).
    requests_per_minute: Annotated[int, msgspec.Meta(ge=1, le=MAX_REQUESTS_PER_MINUTE)] = 60
    # Input tokens per minute (estimated before a call, corrected after it); 0 = no limit.
    tokens_per_minute: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS_PER_MINUTE)] = 0
    # Grounded prompts per day (the grounding daily bucket); 0 = no limit.
    grounded_prompts_per_day: Annotated[int, msgspec.Meta(ge=0, le=MAX_PER_DAY)] = 0
    # Lower the sending rate on 429s and recover slowly (AIMD), for quotas with no fixed number.
    adaptive: bool = True
    # How far below requests_per_minute to pace, as a share of it: the slack that network
    # jitter and late wake-ups (at most 0.04 s a send) may use. Google counts a minute, so
    # 0.005 is 0.3 s of it. Raise it against a server that counts over a shorter window.
    pacing_headroom: Annotated[float, msgspec.Meta(ge=0, lt=0.5)] = 0.005
    # Calls on the wire at once in one process (the claimer keeps twice as many questions
    # leased); raise it when answers are slow and the rate is not reached.
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=MAX_CONCURRENCY)] = 8
    # Attempts a question gets when its call fails with an error worth retrying (a timeout, a
    # server error); then it ends `failed`. Capacity refusals (503, 429) spend none: see
    # overload_wait_s.
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=MAX_ATTEMPTS)] = 5
    # Seconds a model may refuse for capacity (503 overloaded, 429 throttled) with no answer
    # between before the run stops (exit 1, the questions left waiting for the next run).
    # Until then its refusals are waited out with backoff (each wait at most 64 s) and spend
    # no attempt.
    overload_wait_s: Seconds = 3600.0
    # Seconds a claimed question stays ours without a heartbeat (a crashed run's questions come
    # back after this, or at once when the dead run was on this host). A run paused longer
    # (a suspended machine, a stopped process) sends none of the calls it had not sent.
    lease_s: Annotated[float, msgspec.Meta(ge=5, le=MAX_SECONDS)] = 120.0
    # USD for the whole job (every run); a call whose worst case would exceed what is left is
    # not started. 0 = no budget.
    budget_usd: Annotated[float, msgspec.Meta(ge=0, le=MAX_BUDGET_USD)] = 0.0
    # USD for one question (every run): once its calls have cost this much, it gets no further
    # nudge, re-ask through own retrieval or call 2, and says so (error_class cost_cap). 0 = none.
    max_cost_per_question_usd: Annotated[float, msgspec.Meta(ge=0, le=MAX_BUDGET_USD)] = 0.0
    # Sent as generationConfig.maxOutputTokens (thinking included): the worst case of a call.
    max_output_tokens: Annotated[int, msgspec.Meta(ge=1, le=MAX_OUTPUT_TOKENS)] = 8192
    # Worst-case search queries per grounded call, for per-query grounding fees.
    max_search_queries: Annotated[int, msgspec.Meta(ge=1, le=MAX_SEARCH_QUERIES)] = 10
    # Worst-case search-result tokens per grounded call (toolUsePromptTokenCount).
    max_tool_use_tokens: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOOL_USE_TOKENS)] = 10_000
    # A prices file in the format of pipeline/costs/prices.toml; "" = the bundled one.
    prices_file: str = ""
    # Questions longer than this (characters) are refused at load, with file:line. The default
    # comes from the input limit of the Gemini 2.x models, 1,048,576 tokens: less room for the
    # prompt template and the search results (max_tool_use_tokens), at the worst case of one
    # token per character (CJK and other scripts come close), rounded down. Every question
    # that loads then fits the model's input, whatever its script.
    max_question_chars: Annotated[int, msgspec.Meta(ge=1, le=MAX_QUESTION_CHARS)] = (
        DEFAULT_MAX_QUESTION_CHARS
    )


class StructureSection(_Section):
    """Call 2: the grounded answer reshaped into the user's JSON schema (no tools)."""

    # true: call 2 reshapes each grounded answer into [structure] schema's JSON.
    enabled: bool = False
    # A JSON Schema file (relative to the job file); checked at load, before any call.
    schema: str = ""
    # "" = the same model as call 1.
    model: Annotated[str, msgspec.Meta(max_length=100)] = ""
    # Call 2's instructions for this job, after its own rules in systemInstruction; "" = none.
    instructions: str = ""
    # Sent only when set (Gemini 3 deprecates sampling parameters; see [model] temperature).
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    # responseJsonSchema (JSON Schema) or responseSchema (the OpenAPI subset).
    wire_field: Literal["responseJsonSchema", "responseSchema"] = "responseJsonSchema"
    # true: records with a value found in no supported span of the answer are flagged.
    require_supported: bool = False
    # "two_call": ground, then structure. "single": ask for both in call 1 (models that claim
    # to accept schema + search); falls back to two calls on a 400 or an ungrounded reply.
    mode: Literal["two_call", "single"] = "two_call"


class RefreshSection(_Section):
    # Done questions whose latest answer is older than this are asked again by `ground run`
    # (e.g. "7d", "12h", "90m"); "" = never. The earlier answers are kept as history.
    max_age: str = ""


class BatchSection(_Section):
    """``[model] mode = "batch"``: how questions go through the Gemini Batch API."""

    # Requests per batch and bytes per JSONL file (one file per batch; the file limit is 2 GB).
    max_requests: Annotated[int, msgspec.Meta(ge=1, le=MAX_BATCH_REQUESTS)] = 50_000
    # Bytes per batch file: a batch is cut at max_requests or at this, whichever comes first.
    max_bytes: Annotated[int, msgspec.Meta(ge=1024, le=2_000_000_000)] = 1_000_000_000
    # Polling a batch: first wait, doubled up to the cap (seconds).
    poll_initial_s: Seconds = 30.0
    # The longest wait between two polls of a batch (seconds): see poll_initial_s.
    poll_max_s: Seconds = 600.0
    # false: `ground run` returns once the batch is submitted; a later run picks it up.
    wait: bool = True
    # Questions a batch gave back (failed rows, an expired or failed batch): "batch" = into
    # the next batch, "online" = asked online by the same run.
    retries: Literal["batch", "online"] = "batch"
    # true: call 2 (the structure step) goes as a second batch too; false: online.
    structure: bool = True
    # Seconds a question stays leased to a submitted batch (Google's target is 24 h).
    lease_s: Annotated[float, msgspec.Meta(ge=60, le=MAX_SECONDS)] = 72 * 3600.0
    # Vertex batch prediction (model.backend = "vertex"): where the input JSONL goes and where
    # Vertex writes its output (gs://BUCKET/PREFIX; both required in batch mode), and the
    # Cloud Storage JSON API endpoint ("" = STORAGE_EMULATOR_HOST if set, else
    # https://storage.googleapis.com).
    gcs_input: str = ""
    # Vertex batch prediction: where Vertex writes its output (gs://BUCKET/PREFIX).
    gcs_output: str = ""
    # Vertex batch prediction: the Cloud Storage JSON API endpoint; "" = STORAGE_EMULATOR_HOST
    # if set, else https://storage.googleapis.com.
    gcs_endpoint: str = ""


class ResolverSection(_Section):
    # false: the redirect links are stored but never resolved to their destinations.
    enabled: bool = True
    # The hosts the resolver may request (host, or host:port); it never requests another, and
    # refuses loopback and private addresses unless listed with their port (the emulator's).
    allow_hosts: tuple[str, ...] = DEFAULT_REDIRECT_HOSTS
    # Lookups in flight; 0 = automatic: requests_per_second / 4, within 16..256.
    concurrency: Annotated[int, msgspec.Meta(ge=0, le=MAX_CONCURRENCY)] = 0
    # Lookups per second; 0 = automatic: enough to keep up with the answers
    # (limits.requests_per_minute / 60 x pipeline.job.capacity.RESOLVES_PER_ANSWER), at least 20.
    requests_per_second: Annotated[float, msgspec.Meta(ge=0, le=MAX_LOOKUPS_PER_SECOND)] = 0.0
    # Seconds one redirect lookup may take (a timeout is retried with backoff, then `failed`).
    timeout_s: Seconds = 10.0


class VerifySection(_Section):
    """``[verify]``: citations checked against what they cite (``ground verify JOB``)."""

    # true: `ground verify` checks the sample's citations, `ground estimate` counts those calls,
    # and a batch run verifies after collect; false: `ground verify` refuses, exit 2.
    enabled: bool = False
    # "all", a share of each class (0 < x < 1) or a count of answers (an integer >= 1).
    sample: int | float | str = "all"
    seed: int = 0  # the sample's seed: the same answers on a rerun
    # A class whose precision's 95 % interval lies wholly below this fails the command (exit
    # 3); 0 = no gate.
    fail_below: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    model: str = ""  # "" = [model] name


class SourcesSection(_Section):
    """``[sources]``: rules on where the cited sources lead (their resolved destinations), by
    registrable domain (:mod:`pipeline.grounding.policy`)."""

    # A destination under one of these registrable domains breaks the rules. On Vertex, with
    # google_search or enterprise_web_search, they are also sent as excludeDomains.
    deny_domains: tuple[str, ...] = ()
    # When not empty: a destination outside these registrable domains breaks the rules.
    allow_domains: tuple[str, ...] = ()
    # What a source that breaks either list gets: "flag" marks it; "drop" leaves its citations
    # out of every read and export (kept in the database) and lowers the answer's coverage;
    # "reask" asks its question once more, naming the domains to avoid (then flags).
    action: Literal["flag", "drop", "reask"] = "flag"


# The events [notify] sends: a run's end (run.finished: exit 0 or 3; run.stopped: it stopped
# early or could not do its work, exit 1 or 2, with the cause), the budget stopping the
# spending, a batch submitted or completed (batch mode), and `ground verify`'s gate failing.
NOTIFY_EVENTS = (
    "run.finished",
    "run.stopped",
    "budget.reached",
    "batch.submitted",
    "batch.completed",
    "verify.gate_failed",
)
NotifyEvent = Literal[
    "run.finished",
    "run.stopped",
    "budget.reached",
    "batch.submitted",
    "batch.completed",
    "verify.gate_failed",
]


class NotifySection(_Section):
    """``[notify]``: signed webhooks (Standard Webhooks), written to the job's database when
    they happen and delivered from there (:mod:`pipeline.notify`)."""

    # Where the events are POSTed: an https URL, or http to a loopback host (tests); "" = none.
    url: str = ""
    # The environment variable that holds the signing secret (whsec_...): read when an event
    # is sent, never stored nor logged.
    secret_env: str = ""
    # The events sent (NOTIFY_EVENTS: all of them by default).
    events: tuple[NotifyEvent, ...] = NOTIFY_EVENTS
    # Seconds one delivery attempt may take.
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=300)] = 10.0
    # Deliveries tried before an event is given up (a connection error, a timeout, 408, 429
    # or 5xx is tried again, after 1, 2, 4 ... s).
    attempts: Annotated[int, msgspec.Meta(ge=1, le=10)] = 4

    def sends(self, event: str) -> bool:
        """Whether ``event`` is written and delivered."""
        return bool(self.url) and event in self.events


class CanarySection(_Section):
    """``[canary]``: ``ground canary JOB --model NEW`` asks a sample of the job's answered
    questions on a new model, beside the job's answers, and compares the two."""

    # Answered questions asked again on the new model (stratified by class), and the seed
    # that picks them (the same questions on a rerun).
    sample: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 20
    seed: int = 0
    # The gate (exit 3 when it fails; 0 = off): the new model's grounded rate over the old
    # one's must reach min_grounded_rate_ratio; its cost per answer over the old one's must
    # stay at or below max_cost_ratio.
    min_grounded_rate_ratio: Annotated[float, msgspec.Meta(ge=0, le=10)] = 0.0
    max_cost_ratio: Annotated[float, msgspec.Meta(ge=0, le=1000)] = 0.0


class RawJob(_Section):
    job: JobSection
    source: SourceSection
    model: ModelSection = ModelSection()
    grounding: GroundingSection = GroundingSection()
    limits: LimitsSection = LimitsSection()
    resolver: ResolverSection = ResolverSection()
    structure: StructureSection = StructureSection()
    refresh: RefreshSection = RefreshSection()
    batch: BatchSection = BatchSection()
    retrieval: RetrievalSection = RetrievalSection()
    verify: VerifySection = VerifySection()
    sources: SourcesSection = SourcesSection()
    notify: NotifySection = NotifySection()
    canary: CanarySection = CanarySection()
