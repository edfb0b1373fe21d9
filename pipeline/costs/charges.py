"""Accounting: what a call costs, may cost at worst, or is expected to cost, under a price row.

The price table itself (``prices.toml``, :class:`~pipeline.costs.prices.Price`) is
:mod:`pipeline.costs.prices`.

**Unit.** Every amount is US dollars as :class:`decimal.Decimal`, exact (prices are read as
decimals, never through ``float``), so sums of millions of calls do not drift.
``Cost.micro_usd()`` rounds a cost *up* to whole micro-dollars for storage in an integer
column (``1 USD = 1_000_000``); rounding up keeps stored spend an upper bound.

What a call costs (``call_cost``), per ``docs/wire-format.md`` (usage metadata; pricing):

* input: ``promptTokenCount + toolUsePromptTokenCount`` (search results land in
  ``toolUsePromptTokenCount`` and are billed as input); ``cachedContentTokenCount`` (a part
  of ``promptTokenCount``) at the cached rate when the row has one;
* output: ``candidatesTokenCount + thoughtsTokenCount`` (thinking is billed as output);
* the long-context rates apply when ``promptTokenCount + toolUsePromptTokenCount`` exceeds the
  row's ``long_context_above`` (Google's tiers are "prompts > 200k tokens");
* grounding: ``per_prompt`` rows bill one unit per response that carries
  ``groundingMetadata`` (2.x, and Google Maps on every model); ``per_query`` rows (Google
  Search on Gemini 3.x) bill each **distinct non-empty** query of ``webSearchQueries``
  (Google: "we ignore the empty web search queries when counting unique queries"). A query
  of blanks only counts as empty; queries are compared exactly as sent, not trimmed, so
  ``" b"`` and ``"b"`` are two units: Google's normalisation is not documented, and the
  exact comparison never counts fewer queries than Google can bill (the ledger stays an
  upper bound). ``imageSearchQueries`` are stored but not billed here: no source prices them
  apart from the search they belong to. For a data store
  (``vertex_ai_search``) the units are the non-empty ``retrievalQueries``, at least one when
  the response is grounded (whether each is billed separately is unconfirmed). ``none`` rows
  (``url_context``, ``file_search``: no fee of their own; what they fetch is billed as input
  through ``toolUsePromptTokenCount``) bill nothing and leave the cost complete.
  Each tool's fee is its own line of the cost (:class:`ToolCharge`, ``Cost.charges``): Maps
  grounding ($25 / 1,000 grounded prompts) never merges into the Search line.
* a response with no candidates (a blocked prompt) is billed for its tokens all the same: its
  ``usageMetadata`` is priced; with no ``groundingMetadata`` there is no grounding fee.

Free allowances (1,500 grounded prompts a day, 5,000 queries a month ...) are never deducted
and batch discounts applied only in batch mode (a ``[[batch_rate]]`` row,
:meth:`~pipeline.costs.prices.PriceTable.for_batch`): costs here are an upper bound of the bill.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from pipeline.costs.prices import GroundingFee, Price
from pipeline.gemini.wire import GroundingMetadata, UsageMetadata

__all__ = [
    "DEFAULT_MAX_TOOL_USE_TOKENS",
    "INPUT_TOKEN_LIMIT",
    "ZERO_COST",
    "Cost",
    "ToolCharge",
    "WorstCase",
    "billed_queries",
    "call_cost",
    "expected_cost",
    "worst_case_cost",
]

# Worst-case assumption for search results billed as input when the job does not say:
# the recorded fixtures show hundreds of tokens (vercel/ai: 308); a generous bound.
DEFAULT_MAX_TOOL_USE_TOKENS = 10_000
# The input token limit of every Gemini 2.x and 3 model ("Input token limit 1,048,576",
# https://ai.google.dev/gemini-api/docs/models; a longer prompt is refused with "The input
# token count (N) exceeds the maximum number of tokens allowed (1048576)"). Pages a tool reads
# count within it, so no call is billed for more input than this.
INPUT_TOKEN_LIMIT = 1_048_576
_MILLION = Decimal(1_000_000)
_THOUSAND = Decimal(1_000)
_ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class ToolCharge:
    """One grounding tool's fee within a call's cost: its own line (Maps apart from Search)."""

    tool: str
    kind: str  # per_prompt | per_query | none
    units: int
    usd: Decimal


@dataclass(frozen=True, slots=True)
class Cost:
    """What a call cost (or may cost), in exact USD, with its breakdown."""

    input_usd: Decimal = _ZERO
    output_usd: Decimal = _ZERO
    grounding_usd: Decimal = _ZERO
    input_tokens: int = 0  # billed as input: prompt (incl. cached) + tool use
    output_tokens: int = 0  # candidates + thoughts
    grounding_units: int = 0  # grounded prompts (per_prompt) or billed queries (per_query)
    # False when the response was grounded but the row has no fee for the tool: the
    # grounding part is missing from the total.
    complete: bool = True
    charges: tuple[ToolCharge, ...] = ()  # the grounding fee, one line per tool billed

    def charge(self, tool: str) -> ToolCharge | None:
        """The line of ``tool``'s fee, None when it was not billed."""
        return next((c for c in self.charges if c.tool == tool), None)

    @property
    def total(self) -> Decimal:
        return self.input_usd + self.output_usd + self.grounding_usd

    def micro_usd(self) -> int:
        """The total in whole micro-dollars, rounded up (for an integer column)."""
        return math.ceil(self.total * _MILLION)


ZERO_COST = Cost()


def _non_empty(queries: tuple[str, ...]) -> int:
    return sum(1 for q in queries if q.strip())


def billed_queries(queries: tuple[str, ...]) -> int:
    """Search queries a ``per_query`` fee bills: the distinct ones that are not blank,
    compared exactly as sent (``["a", "a", "", " b"]`` -> 2)."""
    return len({q for q in queries if q.strip()})


ToolSpec = str | Sequence[str] | None  # one grounding tool, several, or none


def _tools(tool: ToolSpec) -> tuple[str, ...]:
    if tool is None:
        return ()
    return (tool,) if isinstance(tool, str) else tuple(tool)


def _grounding_units(
    fee: GroundingFee, tool: str, grounding: GroundingMetadata, billed_floor: float = 0.0
) -> int:
    """Billable units of one tool in one grounded response (per prompt or per query).

    ``billed_floor``: the billed search queries per grounded response the invoice taught
    (``ground reconcile``); a Google Search response then bills at least that many (rounded
    up), however few it lists."""
    if fee.kind == "none":
        return 0
    if fee.kind == "per_prompt":
        return 1
    if tool == "vertex_ai_search":
        return max(1, _non_empty(grounding.retrieval_queries))
    # An Interactions answer also says how many searches ran (usage.grounding_tool_count):
    # the largest of the distinct queries, that count and the learned floor is billed.
    listed = max(billed_queries(grounding.web_search_queries), grounding.grounding_tool_count or 0)
    return max(listed, math.ceil(billed_floor))


def _tool_used(tool: str, grounding: GroundingMetadata) -> bool:
    """With several tools declared: did this response use ``tool``? (Its chunks or queries.)"""
    chunks = grounding.grounding_chunks
    if tool == "google_maps":
        return any(c.maps is not None for c in chunks)
    if tool in ("vertex_ai_search", "file_search"):
        return any(c.retrieved_context is not None for c in chunks) or bool(
            grounding.retrieval_queries
        )
    if tool == "url_context":
        return True  # no query trace of its own; its fee (if a row has one) always applies
    return _non_empty(grounding.web_search_queries) > 0


def call_cost(
    price: Price,
    usage: UsageMetadata,
    grounding: GroundingMetadata | None,
    *,
    tool: ToolSpec = "google_search",
    billed_floor: float = 0.0,
) -> Cost:
    """The cost of one finished call from its ``usageMetadata`` and ``groundingMetadata``.

    ``tool`` is the grounding tool the request declared, or several (None for an ungrounded
    call, such as the structuring call). ``grounding`` None = the model did not ground: no
    grounding fee. With several tools, each tool the response shows it used adds its fee;
    a used tool with no fee in the row makes the cost incomplete. ``billed_floor``: the
    learned billed queries per grounded response (:func:`_grounding_units`).
    """
    prompt = usage.prompt_token_count
    tool_use = usage.tool_use_prompt_token_count
    input_tokens = prompt + tool_use
    in_rate, out_rate = price.rates(input_tokens)
    cached = min(max(usage.cached_content_token_count, 0), prompt)
    long = in_rate is not price.input_per_1m
    cached_rate = (
        price.cached_input_per_1m if price.cached_input_per_1m is not None and not long else in_rate
    )
    input_usd = ((input_tokens - cached) * in_rate + cached * cached_rate) / _MILLION
    output_tokens = usage.candidates_token_count + usage.thoughts_token_count
    output_usd = output_tokens * out_rate / _MILLION
    charges, complete = _charges(price, grounding, _tools(tool), billed_floor)
    return Cost(
        input_usd,
        output_usd,
        sum((c.usd for c in charges), _ZERO),
        input_tokens,
        output_tokens,
        sum(c.units for c in charges),
        complete,
        charges,
    )


def _charges(
    price: Price,
    grounding: GroundingMetadata | None,
    declared: tuple[str, ...],
    billed_floor: float = 0.0,
) -> tuple[tuple[ToolCharge, ...], bool]:
    """The fee line of each declared tool the response used, and whether every used tool had
    a known fee. Not grounded (``grounding`` None, or no candidates at all): no line."""
    if grounding is None:
        return (), True
    lines: list[ToolCharge] = []
    complete = True
    for name in declared:
        if len(declared) > 1 and not _tool_used(name, grounding):
            continue
        fee = price.fee(name)
        if fee is None:
            complete = False
            continue
        n = _grounding_units(fee, name, grounding, billed_floor)
        lines.append(ToolCharge(name, fee.kind, n, n * fee.usd_per_1k / _THOUSAND))
    return tuple(lines), complete


def _worst_units(fee: GroundingFee, max_search_queries: int) -> int:
    if fee.kind == "none":
        return 0
    return 1 if fee.kind == "per_prompt" else max(max_search_queries, 1)


def worst_case_cost(
    price: Price,
    *,
    prompt_tokens_estimate: int,
    max_output_tokens: int,
    max_search_queries: int,
    max_tool_use_tokens: int = DEFAULT_MAX_TOOL_USE_TOKENS,
    tool: ToolSpec = "google_search",
) -> Cost:
    """The most one call may cost, for the budget check before it starts.

    Assumes: the prompt is ``prompt_tokens_estimate`` tokens (use ``limits.estimate_tokens``,
    which over-counts) plus ``max_tool_use_tokens`` of search results, all at the full input
    rate (no cache discount); ``max_output_tokens`` tokens of output including thinking (the
    request must send ``generationConfig.maxOutputTokens`` for this to be a bound); the
    response is grounded, running ``max_search_queries`` queries (``per_query``; at least 1)
    or one grounded prompt (``per_prompt``), for every declared tool. Raises ``ValueError``
    when a tool has no fee in the row: an unknown fee has no bound.
    """
    declared = _tools(tool)
    tool_use = max_tool_use_tokens if declared else 0
    input_tokens = max(prompt_tokens_estimate, 0) + max(tool_use, 0)
    in_rate, out_rate = price.rates(input_tokens)
    output_tokens = max(max_output_tokens, 0)
    units = 0
    grounding_usd = _ZERO
    for name in declared:
        fee = price.fee(name)
        if fee is None:
            raise ValueError(f"no grounding fee for {name} in the price row {price.describe()}")
        n = _worst_units(fee, max_search_queries)
        units += n
        grounding_usd += n * fee.usd_per_1k / _THOUSAND
    return Cost(
        input_tokens * in_rate / _MILLION,
        output_tokens * out_rate / _MILLION,
        grounding_usd,
        input_tokens,
        output_tokens,
        units,
    )


def expected_cost(
    price: Price,
    *,
    prompt_tokens: float,
    output_tokens: float,
    tool_use_tokens: float = 0,
    search_queries: float = 1,
    grounded_share: float = 1.0,
    tool: ToolSpec = "google_search",
) -> Cost:
    """The expected cost of one call from mean usage (for ``ground estimate JOB``).

    Feed it the means observed so far in the job (or guesses before the first call); the
    estimate of what remains is ``expected_cost(...).total * remaining_questions``.
    """
    d = Decimal
    inputs = d(str(prompt_tokens)) + d(str(tool_use_tokens))
    outputs = d(str(output_tokens))
    in_rate, out_rate = price.rates(int(inputs))
    grounding_usd = _ZERO
    declared = _tools(tool)
    complete = True
    for name in declared:
        fee = price.fee(name)
        if fee is None:
            complete = False
            continue
        per_call = d(_worst_units(fee, 1)) if fee.kind != "per_query" else d(str(search_queries))
        units = d(str(grounded_share)) * per_call
        grounding_usd += units * fee.usd_per_1k / _THOUSAND
    return Cost(
        inputs * in_rate / _MILLION,
        outputs * out_rate / _MILLION,
        grounding_usd,
        int(inputs),
        int(outputs),
        0,
        complete=complete,
    )


@dataclass(frozen=True, slots=True)
class WorstCase:
    """The job's bounds on one call, under which its worst case is computed: what a call
    (online) or a batch (the sum of its requests) holds in the budget before it is sent.

    ``max_output_tokens`` is sent as ``generationConfig.maxOutputTokens``; the other two are
    the job's assumptions: search queries run and search-result tokens read per grounded call.
    """

    max_output_tokens: int
    max_search_queries: int
    max_tool_use_tokens: int

    def micro(
        self,
        price: Price,
        prompt_tokens_estimate: int,
        tool: ToolSpec,
        *,
        billed_floor: float = 0.0,
    ) -> int:
        """The worst case of one request, in micro-dollars (rounded up like the stored cost).

        ``tool``: the grounding tool(s) declared, None for a call without tools (call 2);
        ``billed_floor``: the billed queries per grounded response the invoice taught (the
        worst case counts at least that many)."""
        return worst_case_cost(
            price,
            prompt_tokens_estimate=prompt_tokens_estimate,
            max_output_tokens=self.max_output_tokens,
            max_search_queries=max(self.max_search_queries, math.ceil(billed_floor)),
            max_tool_use_tokens=self.max_tool_use_tokens if tool is not None else 0,
            tool=tool,
        ).micro_usd()

    def reading_micro(self, price: Price, prompt_tokens_estimate: int) -> int:
        """The worst case of a call whose tool reads pages of no known size (``url_context``
        in verification: up to 20 URLs of up to 34 MB each), in micro-dollars.

        Nothing bounds what the pages add but the model's input window, so the whole window
        (:data:`INPUT_TOKEN_LIMIT`, or the prompt's estimate if larger) is counted as input, at
        the rate for a prompt of that size (the long-context rate where the row has one), plus
        ``max_output_tokens`` of output. No grounding fee: ``url_context`` has none."""
        return worst_case_cost(
            price,
            prompt_tokens_estimate=max(prompt_tokens_estimate, INPUT_TOKEN_LIMIT),
            max_output_tokens=self.max_output_tokens,
            max_search_queries=0,
            max_tool_use_tokens=0,
            tool=None,
        ).micro_usd()
