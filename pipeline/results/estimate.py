"""``ground estimate``: what the rest of a job is expected to cost, before it is paid for.

When the job has finished questions, the estimate is what they cost on average (the ledger),
times the questions left: it includes the real share of retries, nudges and call 2. Before the
first answer it falls back to the price table with assumed usage, and says so: call 1 at the
job's model, plus call 2 (when the job structures its answers) at the structure model, each
at the batch rate when it goes through the Batch API. The worst case (every call at its
bound, as the budget reserves it) is printed beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.costs.charges import WorstCase, expected_cost
from pipeline.costs.prices import Price, PriceTable
from pipeline.gemini.tokens import estimate_tokens
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.calls import GroundedCall, StructureCall
from pipeline.store.ledger import micro_to_usd, read_estimate_basis, reconciled_gap_micro
from pipeline.structure.validate import REPAIR_RETRIES

__all__ = [
    "Estimate",
    "JobPrices",
    "estimate_remaining",
    "job_prices",
    "unbudgeted_note",
]

# Assumed usage of one grounded call before any was observed (a short factual answer).
ASSUMED_OUTPUT_TOKENS = 600
ASSUMED_TOOL_USE_TOKENS = 1_500
ASSUMED_SEARCH_QUERIES = 2
# Assumed usage of call 2: the source list it is shown, and the JSON it writes.
ASSUMED_SOURCE_LIST_TOKENS = 150
ASSUMED_STRUCTURED_TOKENS = 300
# Expected spend (USD) above which a job with no budget is told which key caps it.
UNBUDGETED_NOTE_USD = Decimal(100)


@dataclass(frozen=True, slots=True)
class JobPrices:
    """The rows a job's calls are charged at. ``structure`` is None when call 2 has no price;
    ``structures`` says whether the job makes call 2 at all."""

    grounding: Price | None
    structure: Price | None
    structures: bool
    structure_model: str


def job_prices(
    table: PriceTable,
    backend: str,
    ground: GroundedCall,
    structure: StructureCall | None,
    *,
    ground_in_batch: bool,
    structure_in_batch: bool,
) -> JobPrices:
    """Call 1 at the job's model, call 2 (asked apart, not in single mode) at the structure
    model; each at the Batch API's rate when it goes as a batch."""
    grounding = (table.for_batch if ground_in_batch else table.for_model)(ground.model, backend)
    structures = structure is not None and ground.single is None
    model = structure.model if structure is not None else ground.model
    price = None
    if structures:
        price = (table.for_batch if structure_in_batch else table.for_model)(model, backend)
    return JobPrices(grounding, price, structures, model)


@dataclass(frozen=True, slots=True)
class Estimate:
    remaining: int
    per_question: Decimal
    total: Decimal
    worst_total: Decimal | None
    basis: str  # where per_question comes from


def unbudgeted_note(budget: Decimal | None, expected: Decimal) -> str | None:
    """One line naming ``[limits] budget_usd`` when no budget is set and ``expected`` is over
    :data:`UNBUDGETED_NOTE_USD`; None otherwise."""
    if budget is not None or expected <= UNBUDGETED_NOTE_USD:
        return None
    return (
        f"no budget is set and this is expected to cost ${expected:,.2f}: set [limits]"
        " budget_usd (or --set limits.budget_usd=N) to cap what the job may spend"
    )


async def estimate_remaining(
    connection: AsyncConnection,
    job_id: int,
    *,
    ground: GroundedCall,
    structure: StructureCall | None,
    worst_case: WorstCase,
    prices: JobPrices,
    billed_queries: float = 0.0,
) -> Estimate:
    """What the questions not yet finished are expected to cost, and at worst.

    ``billed_queries``: the billed search queries per grounded request the invoice taught
    (``ground reconcile``): the assumed usage and the worst case count at least that many,
    and the mean cost of the finished questions includes the reconciled bill's gap."""
    stored = await read_estimate_basis(connection, job_id)
    remaining, finished, spent = stored.remaining, stored.finished, stored.spent
    gap = micro_to_usd(await reconciled_gap_micro(connection, job_id))
    question_tokens = int(stored.mean_question_chars / 4) + 1
    worst = _worst_per_question(
        ground, structure, worst_case, prices, question_tokens, billed_queries
    )
    worst_total = None if worst is None else worst * remaining
    if finished:
        per_question = (spent + gap) / finished
        basis = f"the mean cost of the {finished} finished questions"
        if gap:
            basis += f", with the ${gap:.4f} the reconciled bill showed beyond the ledger"
    elif prices.grounding is not None:
        per_question, basis = _assumed_per_question(
            ground, structure, prices, question_tokens, billed_queries
        )
    else:
        per_question = Decimal(0)
        basis = f"no price known for {ground.model}: add a row to the prices file"
    return Estimate(remaining, per_question, per_question * remaining, worst_total, basis)


def _assumed_per_question(
    ground: GroundedCall,
    structure: StructureCall | None,
    prices: JobPrices,
    question_tokens: int,
    billed_queries: float = 0.0,
) -> tuple[Decimal, str]:
    """One question's cost from assumed usage, and the sentence that says so."""
    assert prices.grounding is not None
    prompt = estimate_tokens(ground.prompt_template) + question_tokens
    searches = max(float(ASSUMED_SEARCH_QUERIES), billed_queries)
    per_question = expected_cost(
        prices.grounding,
        prompt_tokens=prompt,
        output_tokens=ASSUMED_OUTPUT_TOKENS,
        tool_use_tokens=ASSUMED_TOOL_USE_TOKENS,
        search_queries=searches,
        tool=ground.tool,
    ).total
    basis = (
        f"assumed usage ({ASSUMED_OUTPUT_TOKENS} output tokens, {searches:g}"
        f" searches) at {prices.grounding.describe()}"
    )
    if prices.structures and prices.structure is not None:
        assert structure is not None
        per_question += expected_cost(
            prices.structure,
            prompt_tokens=_structure_prompt_tokens(
                structure, question_tokens, ASSUMED_OUTPUT_TOKENS
            ),
            output_tokens=ASSUMED_STRUCTURED_TOKENS,
            tool=None,
        ).total
        basis += (
            f", plus call 2 ({ASSUMED_STRUCTURED_TOKENS} output tokens)"
            f" at {prices.structure.describe()}"
        )
    elif prices.structures:
        basis += f", without call 2: no price known for {prices.structure_model}"
    return per_question, basis + "; no question has finished yet"


def _worst_per_question(
    ground: GroundedCall,
    structure: StructureCall | None,
    worst_case: WorstCase,
    prices: JobPrices,
    question_tokens: int,
    billed_queries: float = 0.0,
) -> Decimal | None:
    """Every call of one question at its bound: call 1 and its ungrounded retries, then call 2
    and its repair. None when a call has no bound (no price, or a tool with no fee)."""
    if prices.grounding is None or (prices.structures and prices.structure is None):
        return None
    prompt = estimate_tokens(ground.prompt_template) + question_tokens
    try:
        call_1 = worst_case.micro(
            prices.grounding, prompt, ground.tool, billed_floor=billed_queries
        )
    except ValueError:
        return None
    worst = call_1 * (1 + ground.ungrounded_retries)
    if prices.structure is not None:
        assert structure is not None
        prompt = _structure_prompt_tokens(structure, question_tokens, worst_case.max_output_tokens)
        worst += worst_case.micro(prices.structure, prompt, None) * (1 + REPAIR_RETRIES)
    return micro_to_usd(worst)


def _structure_prompt_tokens(
    structure: StructureCall, question_tokens: int, answer_tokens: int
) -> int:
    """Call 2's prompt: its fixed part (rules, instructions, schema) as built for an empty
    answer, plus the question, an answer of ``answer_tokens`` and an assumed source list."""
    empty = GroundedAnswer(
        grounded=True,
        text="",
        citations=(),
        sources=(),
        coverage=0.0,
        unsupported_spans=(),
        web_search_queries=(),
        retrieval_queries=(),
        search_entry_point_html=None,
        warnings=(),
    )
    fixed = estimate_tokens(structure.body("", empty).decode())
    return fixed + question_tokens + answer_tokens + ASSUMED_SOURCE_LIST_TOKENS
