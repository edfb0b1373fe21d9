"""The calls a job makes, as the plain values ``gemini/`` takes: endpoints, request builders
and what each call's step needs to know.

``gemini/`` knows nothing of job files: :func:`plan_calls` is the one place that reads
``[model]``, ``[grounding]``, ``[limits]``, ``[structure]`` and ``[retrieval]`` to build them.
The online run and batch mode both take a :class:`CallPlan`, so a question is asked the same
way in both. Call 1 is the grounded call (:class:`GroundedCall`) or, for the classes routed
to it, own retrieval's (:class:`OwnRetrievalCall`); call 2 is :class:`StructureCall`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.costs.charges import WorstCase
from pipeline.costs.prices import Price
from pipeline.gemini.endpoint import TOKEN_TIMEOUT_S, Endpoint, endpoint_for
from pipeline.gemini.request import GroundedRequestBuilder, PassagesRequestBuilder
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.grounded_request import grounded_request_builder, model_generation
from pipeline.job.model_rules import thinking_config
from pipeline.job.spec import JobSpec
from pipeline.structure.fingerprint import schema_hash
from pipeline.structure.prompt import build_structure_body
from pipeline.structure.schema import PreparedSchema

__all__ = [
    "OWN_STEP",
    "CallPlan",
    "Embedding",
    "GroundedCall",
    "OwnRetrievalCall",
    "StructureCall",
    "grounded_call",
    "own_retrieval_call",
    "plan_calls",
    "structure_call",
    "worst_case",
]


@dataclass(frozen=True, slots=True)
class GroundedCall:
    """Call 1, grounded: its model, the tools it declares, and how its body is built.

    ``single``: the builder that also asks for the schema (``[structure] mode = "single"``);
    ``required`` / ``ungrounded_retries``: an ungrounded answer is asked again with a recency
    nudge this many times; ``url_field``: the question's metadata field holding its own URLs
    (``url_context``).
    """

    model: str
    tool: str | tuple[str, ...]
    prompt_template: str  # what the builder puts the question into
    builder: GroundedRequestBuilder
    single: GroundedRequestBuilder | None
    required: bool
    ungrounded_retries: int
    url_field: str

    @property
    def tools(self) -> tuple[str, ...]:
        """The declared tools, in the job file's order."""
        return (self.tool,) if isinstance(self.tool, str) else self.tool

    def body(
        self,
        text: str,
        meta: Mapping[str, Any] | None,
        *,
        nudge: bool = False,
        single: bool = False,
    ) -> bytes:
        """The request body for one question (``meta``: its metadata, for its own URLs)."""
        builder = self.single if single and self.single is not None else self.builder
        return builder.body(text, nudge=nudge, urls=self.urls(meta))

    def urls(self, meta: Mapping[str, Any] | None) -> tuple[str, ...]:
        """The question's own URLs for ``url_context``: its ``url_field`` metadata.

        The field holds one URL, several separated by whitespace, or a list of them;
        duplicates and anything that is not text are left out, the order kept.
        """
        if not self.url_field or not meta:
            return ()
        value = meta.get(self.url_field)
        items = (
            value.split() if isinstance(value, str) else value if isinstance(value, list) else []
        )
        urls = (item.strip() for item in items if isinstance(item, str))
        return tuple(dict.fromkeys(url for url in urls if url))


@dataclass(frozen=True, slots=True)
class StructureCall:
    """Call 2: no tools, JSON in the job's schema; how its output is judged."""

    model: str
    schema: PreparedSchema
    schema_hash: str
    instructions: str
    temperature: float | None  # sent only when the job sets it
    require_supported: bool  # flag objects with a value found in no supported span
    generation: Mapping[str, Any] = field(default_factory=dict)  # e.g. thinkingConfig

    def body(
        self, question: str, answer: GroundedAnswer, previous_errors: Sequence[str] = ()
    ) -> bytes:
        """The request body reshaping ``answer``; ``previous_errors``: a repair's."""
        return build_structure_body(
            question=question,
            answer=answer,
            schema=self.schema,
            instructions=self.instructions,
            temperature=self.temperature,
            generation=self.generation,
            previous_errors=previous_errors,
        )


# The ledger's step of an own-retrieval call: not a grounded prompt (no tool, no grounding
# fee, not counted in the day's grounded prompts).
OWN_STEP = "own"


@dataclass(frozen=True, slots=True)
class Embedding:
    """Where and how ``[retrieval] dense`` embeds: the chunks (``ground index``) and the
    questions asked through own retrieval (``ground run``)."""

    endpoint: Endpoint  # the embedding model's generateContent endpoint (its URL is derived)
    model: str
    dimensions: int  # 0 = the model's own
    price: Price | None  # None: no price known, the ledger rows say the cost is incomplete
    timeout_s: float = 60.0


@dataclass(frozen=True, slots=True)
class OwnRetrievalCall:
    """Call 1 through own retrieval: the job's index searched for the question, the passages
    numbered in the prompt, no tool declared (``docs/retrieval.md``).

    ``classes``: the question classes that go straight to it (no managed call);
    ``when_ungrounded``: a managed answer still ungrounded, or grounded with no chunks, after
    its own retries is asked again through it. ``top_k`` passages at most, none scoring under
    ``min_score`` (none left: nothing relevant found, no call). ``embedding``: with
    ``[retrieval] dense``, how each question is embedded (set by the command that runs the
    plan: it needs credentials and prices); None: lexical search only.
    """

    model: str
    builder: PassagesRequestBuilder
    top_k: int
    min_score: float
    classes: frozenset[str] = frozenset()
    when_ungrounded: bool = False
    embedding: Embedding | None = None

    def routes(self, qclass: str | None) -> bool:
        """Whether a question of ``qclass`` goes straight to own retrieval."""
        return qclass is not None and qclass in self.classes

    def with_classes(self, classes: Sequence[str]) -> OwnRetrievalCall:
        """The same call, with ``classes`` routed to it as well (``run --fallback-auto``)."""
        return dataclasses.replace(self, classes=self.classes | frozenset(classes))


@dataclass(frozen=True, slots=True)
class CallPlan:
    """The calls of a job, with their endpoints (sharing one set of credentials)."""

    backend: str
    ground_endpoint: Endpoint
    structure_endpoint: Endpoint
    ground: GroundedCall
    structure: StructureCall | None  # None: the structure step is off
    # Own retrieval (on the ground endpoint, no tool); None: the job has no [retrieval] index.
    own: OwnRetrievalCall | None = None

    @property
    def settings(self) -> str:
        """The fingerprint of what shapes a grounded answer besides the question: the backend,
        the model, and the call-1 body around the question (tools, prompt template, system
        instruction, generation config). Stored with each answer."""
        body = self.ground.builder.body(SETTINGS_PLACEHOLDER)
        return _digest(self.backend, self.ground.model, body, size=16)

    def reuse_key(self, text: str, meta: Mapping[str, Any] | None) -> str:
        """The key under which an answer to this exact request is stored and found again
        (``[job] reuse_answers_within``): the backend, the model and the call-1 body of the
        question (its text, its own URLs, the settings)."""
        single = self.ground.single is not None
        return _digest(self.backend, self.ground.model, self.ground.body(text, meta, single=single))


SETTINGS_PLACEHOLDER = "\x00{question}\x00"  # stands for the question in the fingerprint


def _digest(backend: str, model: str, body: bytes, *, size: int = 32) -> str:
    digest = hashlib.blake2b(f"{backend}\x00{model}\x00".encode(), digest_size=size)
    digest.update(body)
    return digest.hexdigest()


def plan_calls(spec: JobSpec, env: Mapping[str, str] | None = None) -> CallPlan:
    """The job's calls with their endpoints. Raises
    :class:`~pipeline.gemini.endpoint.ConfigurationError` when the backend's credentials or
    project are missing."""
    model = spec.model
    ground = grounded_call(spec)
    structure = structure_call(spec)
    where: dict[str, Any] = {
        "base_url": model.base_url or None,
        "project": model.project or None,
        "location": model.location or None,
        "env": env,
        # A token refresh gets no longer than a model request would.
        "token_timeout_s": min(model.request_timeout_s, TOKEN_TIMEOUT_S),
        "api": model.api,
    }
    ground_endpoint = endpoint_for(model.backend, ground.model, **where)
    structure_endpoint = endpoint_for(
        model.backend,
        structure.model if structure is not None else ground.model,
        auth=ground_endpoint.auth,
        **where,
    )
    return CallPlan(
        model.backend,
        ground_endpoint,
        structure_endpoint,
        ground,
        structure,
        own=own_retrieval_call(spec),
    )


def grounded_call(spec: JobSpec) -> GroundedCall:
    """Call 1 as the job asks for it (no credentials needed)."""
    g = spec.grounding
    single = spec.schema is not None and spec.structure.mode == "single"
    return GroundedCall(
        model=spec.model.name,
        tool=g.tool,
        prompt_template=spec.model.prompt_template,
        builder=request_builder(spec),
        single=request_builder(spec, schema=spec.schema) if single else None,
        required=g.required,
        ungrounded_retries=g.ungrounded_retries,
        url_field=g.url_field,
    )


def own_retrieval_call(spec: JobSpec) -> OwnRetrievalCall | None:
    """Own retrieval as the job asks for it; None when ``[retrieval]`` names no documents.

    The call exists whenever the job has an index (``ground retry --via own_retrieval`` uses
    it); ``[grounding] fallback`` decides which questions it answers by itself.
    """
    r, g = spec.retrieval, spec.grounding
    if not r.configured:
        return None
    routing = g.fallback == "own_retrieval"
    return OwnRetrievalCall(
        model=spec.model.name,
        builder=PassagesRequestBuilder(
            prompt_template=spec.model.prompt_template,
            generation=model_generation(spec.model),
            max_output_tokens=spec.limits.max_output_tokens,
            system_instruction=spec.model.system_instruction,
        ),
        top_k=r.top_k,
        min_score=r.min_score,
        classes=frozenset(g.fallback_classes) if routing else frozenset(),
        when_ungrounded=routing and g.fallback_when == "ungrounded",
    )


def structure_call(spec: JobSpec) -> StructureCall | None:
    """Call 2 as the job asks for it; None when the structure step is off."""
    schema = spec.schema
    if schema is None:
        return None
    model = spec.structure.model or spec.model.name
    thinking = thinking_config(model, spec.model.backend, spec.model.thinking)
    return StructureCall(
        model=model,
        schema=schema,
        schema_hash=schema_hash(schema),
        instructions=spec.structure.instructions,
        temperature=spec.structure.temperature,
        require_supported=spec.structure.require_supported,
        generation={} if thinking is None else {"thinkingConfig": thinking},
    )


def worst_case(spec: JobSpec) -> WorstCase:
    """The job's bounds on one call (``[limits]``), under which its worst case is computed."""
    limits = spec.limits
    return WorstCase(
        max_output_tokens=limits.max_output_tokens,
        max_search_queries=limits.max_search_queries,
        max_tool_use_tokens=limits.max_tool_use_tokens,
    )


def request_builder(
    spec: JobSpec, *, schema: PreparedSchema | None = None
) -> GroundedRequestBuilder:
    """Call 1's request builder; with ``schema``, the single-call mode's."""
    return grounded_request_builder(spec.model, spec.grounding, spec.limits, schema=schema)
