"""Emulator configuration: one frozen dataclass, loadable from a small TOML file.

Every behaviour the emulator can vary is a field here, so a test, the demo and a benchmark
each say exactly which Google they are talking to. A *share* is a probability in ``[0, 1]``
drawn from a per-request RNG derived from ``seed`` (never the global ``random``), so a run
is reproducible under the same seed and request order.

The TOML file mirrors the field names one to one (see ``jobs/emulator.toml``)::

    seed = 7
    latency_p50_ms = 800
    api_keys = ["emulator-key"]

    [quotas."*"]                 # every model without its own table
    rpm = 600

    [quotas."gemini-3.8-flash"]
    rpm = 1000
    tpm = 1_000_000
    grounded_rpd = 1500

Unknown keys are errors that name the file and the key.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pipeline.emulator.models import SHUTDOWNS

__all__ = [
    "EmulatorConfig",
    "ModelQuota",
    "load_config",
]

DEFAULT_API_KEY = "emulator-key"
DEFAULT_BEARER_TOKEN = "emulator-token"  # noqa: S105 - a test token, accepted on the Vertex surface without /token
ALL_MODELS = "*"  # the quota table that applies to models without their own

MINUTE_S = 60.0  # seconds
DAY_S = 86_400.0  # seconds
RETRY_AFTER_FORMS = ("seconds", "date")  # how a 429's Retry-After header is written


class ConfigError(ValueError):
    """A bad emulator config; the message names the file (when there is one) and the key."""


@dataclass(frozen=True, slots=True)
class ModelQuota:
    """Limits for one model; ``0`` means unlimited.

    * ``rpm``: admitted generateContent requests per ``quota_window_s`` (sliding window).
    * ``tpm``: admitted prompt tokens per ``quota_window_s`` (input tokens, as Google counts
      ``...InputTokensPerModelPerMinute``).
    * ``grounded_rpd``: admitted requests that declare a grounding tool per
      ``grounding_window_s`` (counted when declared, whether or not the answer ends up
      grounded: the conservative reading, it runs out no later than Google's would).
    """

    rpm: int = 0
    tpm: int = 0
    grounded_rpd: int = 0


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """Everything the emulator can vary. Shares are probabilities in ``[0, 1]``."""

    seed: int = 0
    # Latency added to each generateContent response: lognormal with this median and 99th
    # percentile (milliseconds). 0 = none. p99 <= p50 means a constant p50.
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0

    # Auth. Developer API: x-goog-api-key header or ?key=. Vertex: Bearer token, either one
    # issued by POST /token or one of bearer_tokens.
    api_keys: frozenset[str] = frozenset({DEFAULT_API_KEY})
    bearer_tokens: frozenset[str] = frozenset({DEFAULT_BEARER_TOKEN})
    access_token_ttl_s: float = 3600.0  # lifetime of tokens issued by POST /token
    token_hang_s: float = 0.0  # POST /token answers only after this long (a hung endpoint)
    # A prompt over this many tokens is refused as Google refuses it: 400 INVALID_ARGUMENT
    # "The input token count (N) exceeds the maximum number of tokens allowed (1048576)."
    # (the input limit of the Gemini 2.x models), before any quota is counted.
    input_token_limit: int = 1_048_576
    # Models Google has switched off, "PREFIX@YYYY-MM-DD" (pipeline.emulator.models): from
    # that day on the emulator's clock a model answers Google's 404 for a model it does not
    # serve. Default: the emulator's own list; [] = a Google from before the shutdowns.
    shutdowns: frozenset[str] = SHUTDOWNS

    # Grounding content (decided from seed + request text: the same question, same outcome).
    ungrounded_share: float = 0.1  # grounding tool declared, no groundingMetadata at all
    thought_share: float = 0.1  # a thought part (thought: true) before the answer (2.5+)
    multipart_share: float = 0.1  # the answer split over two parts (partIndex 1 in segments)
    overlap_share: float = 0.05  # one extra support that overlaps two others
    empty_chunk_share: float = 0.03  # one grounding chunk replaced by {} (still cited)
    empty_query_share: float = 0.1  # a "" in webSearchQueries (gemini-3 and later only)
    block_share: float = 0.0  # promptFeedback.blockReason SAFETY, no candidates
    # A question class the managed path serves badly (own retrieval's fallback, shown): a
    # grounded request whose prompt contains any of these words (case-insensitive) comes
    # back ungrounded for miss_ungrounded_share of prompts, grounded with no chunks for
    # miss_chunkless_share more; other prompts are untouched.
    miss_words: frozenset[str] = frozenset()
    miss_ungrounded_share: float = 0.0
    miss_chunkless_share: float = 0.0
    safety_share: float = 0.0  # a candidate cut with finishReason SAFETY, no grounding
    # Per request (seed + sequence number, so a retry can be sound): every usageMetadata
    # count negative and large, online and in batch results (a body that would refund).
    negative_usage_share: float = 0.0
    # Billing (pipeline.emulator.billing): a grounded Google Search answer bills this many
    # search queries while listing one, or none in every other answer (0 = bill what it
    # lists).
    billed_query_fanout: int = 0
    # The price table the export's costs are at ("" = the bundled one; a row of the Developer
    # API stands in for a model with no Vertex row).
    billing_prices_file: str = ""

    # Redirect links /grounding-api-redirect/<token>.
    redirect_ttl_s: float = 3600.0  # after this many seconds since issue: 404
    redirect_forbidden_share: float = 0.0  # this share of links always answers 403
    # A hostile Google: every 302 points at one of these URLs (in sorted order, picked by the
    # link's page) instead of the publisher's page; the web chunk links of generateContent
    # answers are written with this user:password@ before their host.
    redirect_locations: frozenset[str] = frozenset()
    redirect_userinfo: str = ""

    # Quotas, per model (ALL_MODELS = default), over sliding windows.
    quotas: Mapping[str, ModelQuota] = field(default_factory=lambda: MappingProxyType({}))
    quota_window_s: float = MINUTE_S  # window of rpm and tpm
    grounding_window_s: float = DAY_S  # window of grounded_rpd

    # Injected faults, decided from seed + request sequence number (a retry can succeed).
    fault_429_share: float = 0.0  # 429 RESOURCE_EXHAUSTED with RetryInfo (a per-minute quota)
    fault_429_retry_delay_s: float = 34.4  # the RetryInfo.retryDelay those 429s carry
    fault_500_share: float = 0.0  # 500 INTERNAL "Internal error encountered."
    fault_503_share: float = 0.0  # 503 UNAVAILABLE "The model is overloaded..."
    fault_504_share: float = 0.0  # 504 DEADLINE_EXCEEDED
    fault_502_html_share: float = 0.0  # 502 with an HTML page (a front end, not the API)
    fault_truncate_share: float = 0.0  # 200 whose JSON body is cut short
    fault_hang_share: float = 0.0  # no answer for hang_s (cancelled when the client leaves)
    hang_s: float = 3600.0  # seconds
    # Storms, counted or timed from the emulator's start on its clock (faults.Storms):
    # generateContent answers 503 UNAVAILABLE "overloaded" for its first storm_503_requests
    # requests and while storm_503_s seconds have not passed; a grounded request answers
    # the bare 429 (Help only, no RetryInfo: the daily grounding body) for the first
    # bare_429_requests grounded requests.
    storm_503_requests: int = 0
    storm_503_s: float = 0.0
    bare_429_requests: int = 0
    # Every 429 carries "Retry-After: <retry_after_s>" (0 = no header), as delay-seconds
    # (retry_after_form "seconds") or as an HTTP date that far ahead on the clock ("date").
    retry_after_s: float = 0.0
    retry_after_form: str = "seconds"
    # Structured output (responseMimeType application/json), per request: a share that breaks
    # the schema (required keys dropped), a share that is not JSON at all.
    structured_invalid_share: float = 0.0
    structured_garbage_share: float = 0.0

    # The Batch API (pipeline.emulator.batch), on the emulator's clock.
    batch_delay_s: float = 0.0  # seconds from create to SUCCEEDED (PENDING, then RUNNING)
    batch_failed_row_share: float = 0.0  # rows answered with an error status instead
    batch_expire_first: int = 0  # the first this many batches end EXPIRED
    batch_poll_503_share: float = 0.0  # batch gets answered 503 UNAVAILABLE
    # The rows drawn by batch_failed_row_share are left out of the output (result file,
    # inlinedResponses, Vertex predictions) while batchStats / completionStats still count
    # them failed: a Google that loses rows, for a client's reconciliation to catch.
    batch_drop_failed_rows: bool = False
    # Vertex batch prediction (pipeline.emulator.prediction) uses the three knobs above too
    # (delay, failed rows, expiry: the first batch_expire_first prediction jobs), plus:
    prediction_shard_lines: int = 0  # rows per predictions_NNNN.jsonl; 0 = one predictions.jsonl
    # Cloud Storage (pipeline.emulator.storage): resumable chunks that keep half their bytes
    # and answer 503 (the client must ask how much arrived and go on from there).
    storage_chunk_503_share: float = 0.0

    # Every JSON error body's message ends with the request as some of Google's errors (and
    # the front ends before them) repeat it: its URL with ?key=<the key it carried> and its
    # Authorization header. A client must keep neither (pipeline.redaction).
    echo_request_in_errors: bool = False

    # googleSearch.excludeDomains is honoured: no answer cites an excluded domain, except
    # this share of answers, which ignore it (a misbehaving Google, for status to catch).
    exclude_domains_leak_share: float = 0.0
    # Citation verification (pipeline.emulator.verification): the share of readable (claim,
    # page) pairs judged unsupported, and the share of its own pages it cannot read.
    unsupported_share: float = 0.0
    unreadable_share: float = 0.0
    # A hostile judge: this share of verification answers (by a keyed hash of the request)
    # hold values no column takes or that prove nothing, in turn: a quote with a NUL, a
    # retrieval status of 60 characters, a 5,000-digit claim number, "supported" on the
    # quote "e", a quote with a lone surrogate. Every one of them is still a paid call.
    hostile_judge_share: float = 0.0

    def quota_for(self, model: str) -> ModelQuota:
        """The limits for ``model``: its own table, else ``"*"``, else unlimited."""
        q = self.quotas.get(model)
        if q is None:
            q = self.quotas.get(ALL_MODELS)
        return q if q is not None else _UNLIMITED

    def replace(self, **changes: Any) -> EmulatorConfig:
        """A copy with ``changes`` applied (validated like a loaded file)."""
        return _validated(dataclasses.replace(self, **changes), source="replace()")


_UNLIMITED = ModelQuota()
_SHARE_FIELDS = tuple(
    f.name for f in dataclasses.fields(EmulatorConfig) if f.name.endswith("_share")
)
_NON_NEGATIVE_FIELDS = (
    "latency_p50_ms",
    "latency_p99_ms",
    "access_token_ttl_s",
    "token_hang_s",
    "redirect_ttl_s",
    "quota_window_s",
    "grounding_window_s",
    "hang_s",
    "fault_429_retry_delay_s",
    "input_token_limit",
    "batch_delay_s",
    "batch_expire_first",
    "storm_503_requests",
    "storm_503_s",
    "bare_429_requests",
    "retry_after_s",
    "prediction_shard_lines",
)


def _validated(cfg: EmulatorConfig, *, source: str) -> EmulatorConfig:
    for name in _SHARE_FIELDS:
        v = getattr(cfg, name)
        if not 0.0 <= v <= 1.0:
            raise ConfigError(f"{source}: {name} must be within [0, 1], got {v!r}")
    for name in _NON_NEGATIVE_FIELDS:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"{source}: {name} must be >= 0, got {getattr(cfg, name)!r}")
    if cfg.retry_after_form not in RETRY_AFTER_FORMS:
        raise ConfigError(
            f"{source}: retry_after_form must be one of {RETRY_AFTER_FORMS}, got"
            f" {cfg.retry_after_form!r}"
        )
    fault_total = sum(getattr(cfg, n) for n in _SHARE_FIELDS if n.startswith("fault_"))
    if fault_total > 1.0:
        raise ConfigError(f"{source}: the fault_*_share values add up to {fault_total} > 1")
    for model, q in cfg.quotas.items():
        for name in ("rpm", "tpm", "grounded_rpd"):
            if getattr(q, name) < 0:
                raise ConfigError(f"{source}: quotas.{model!r}.{name} must be >= 0")
    return cfg


def _coerce(name: str, value: Any, source: str) -> Any:
    """Convert a TOML/CLI value to the type of field ``name``."""
    default = getattr(EmulatorConfig(), name)
    where = f"{source}: {name}"
    if isinstance(default, frozenset):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list | tuple | frozenset) or not all(
            isinstance(v, str) for v in value
        ):
            raise ConfigError(f"{where} must be a list of strings")
        return frozenset(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    if isinstance(default, bool):
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            value = value.lower() in ("true", "1")
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, str):
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{where} must be a number, got {value!r}") from None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    raise ConfigError(f"{where}: unsupported type")


def _quotas(raw: Any, source: str) -> Mapping[str, ModelQuota]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: quotas must be a table of model tables")
    out: dict[str, ModelQuota] = {}
    known = {f.name for f in dataclasses.fields(ModelQuota)}
    for model, table in raw.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: quotas.{model!r} must be a table")
        for key, val in table.items():
            if key not in known:
                raise ConfigError(f"{source}: unknown key quotas.{model!r}.{key}")
            if not isinstance(val, int) or isinstance(val, bool):
                raise ConfigError(f"{source}: quotas.{model!r}.{key} must be an integer")
        out[model] = ModelQuota(**table)
    return MappingProxyType(out)


_FIELDS = {f.name for f in dataclasses.fields(EmulatorConfig)}


def config_from_mapping(
    data: Mapping[str, Any], *, source: str = "config", base: EmulatorConfig | None = None
) -> EmulatorConfig:
    """Build a config from plain data (a parsed TOML file, CLI overrides), over ``base``."""
    changes: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _FIELDS:
            raise ConfigError(f"{source}: unknown key {key!r}")
        if key == "quotas":
            changes[key] = _quotas(value, source)
        else:
            changes[key] = _coerce(key, value, source)
    cfg = dataclasses.replace(base or EmulatorConfig(), **changes)
    return _validated(cfg, source=source)


def load_config(path: str | Path, *, base: EmulatorConfig | None = None) -> EmulatorConfig:
    """Read a TOML file whose keys are :class:`EmulatorConfig` field names."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    return config_from_mapping(data, source=str(p), base=base)
