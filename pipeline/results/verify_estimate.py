"""What ``[verify]`` is expected to cost, for ``ground estimate`` and ``ground run --dry-run``.

Pure arithmetic on what the caller read:

* **how many answers** are checked: the job's questions per class (each assumed to end with
  a grounded answer, or at the grounded share of the answers stored so far), taken by the
  ``[verify] sample`` setting as ``ground verify`` takes them
  (:func:`~pipeline.verify.sampling.sample_size`), less the answers already checked by the
  verification model;
* **the calls one answer takes, and their prompts**: the real verification requests
  (:func:`~pipeline.verify.requests.verification_calls`, at most
  :data:`~pipeline.verify.requests.URL_LIMIT` URLs a call, split above it), built for the
  stored answers read (their claims and resolved destinations) or, before any answer is
  stored, for an assumed answer (:data:`ASSUMED_CLAIMS` claims citing
  :data:`ASSUMED_URLS_PER_CLAIM` of :data:`ASSUMED_URLS` destinations);
* **what a call costs**: the verification model's price row, with its prompt as built, each
  page read by ``url_context`` at :data:`ASSUMED_PAGE_TOKENS` input tokens and each verdict at
  :data:`ASSUMED_VERDICT_TOKENS` output tokens; once verification calls are in the ledger
  (step ``verify``), their mean cost instead.

The worst case is what the budget reserves: a ``url_context`` call at the model's whole input
window (:meth:`~pipeline.costs.charges.WorstCase.reading_micro`), a call without tools at its
prompt plus ``max_output_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from pipeline.costs.charges import WorstCase, expected_cost
from pipeline.costs.prices import Price
from pipeline.gemini.tokens import estimate_tokens
from pipeline.store.ledger import micro_to_usd
from pipeline.verify.claims import AnswerClaims, Claim
from pipeline.verify.requests import URL_LIMIT, verification_calls
from pipeline.verify.sampling import sample_size

__all__ = [
    "STORED_ANSWERS_READ",
    "estimate_for_job",
    "render_verification",
]

# An answer assumed before any is stored (a short factual answer with its citations).
ASSUMED_CLAIMS = 4
ASSUMED_URLS = 5
ASSUMED_URLS_PER_CLAIM = 2
ASSUMED_CLAIM_CHARS = 160  # one support's segment text
ASSUMED_URL_CHARS = 80  # one resolved destination
# Usage assumed per call until verification calls are in the ledger.
ASSUMED_PAGE_TOKENS = 4_000  # one page read by url_context, billed as input
ASSUMED_VERDICT_TOKENS = 60  # one (claim, source) verdict with its quote, as output
STORED_ANSWERS_READ = 200  # stored answers the calls per answer are measured on


@dataclass(frozen=True, slots=True)
class CallShape:
    """One verification request as the estimate sees it."""

    reads_pages: bool  # url_context (else: no tools, the sources' own text in the prompt)
    prompt_tokens: int  # estimate_tokens of the whole body
    urls: int
    pairs: int


@dataclass(frozen=True, slots=True)
class VerifyEstimate:
    answers: int  # answers expected to be checked
    calls: Decimal  # verification calls expected
    total: Decimal  # expected USD
    worst_total: Decimal | None  # what the budget reserves for them all; None: no price
    basis: str  # where the figures come from

    @property
    def calls_per_answer(self) -> Decimal:
        return self.calls / self.answers if self.answers else Decimal(0)


def shapes_of(answer: AnswerClaims, model: str, max_output_tokens: int) -> list[CallShape]:
    """The calls that check ``answer``, as built for ``ground verify``."""
    return [
        CallShape(c.kind == "url", estimate_tokens(c.body.decode()), len(c.urls), len(c.pairs))
        for c in verification_calls(answer, model, max_output_tokens=max_output_tokens)
    ]


def assumed_answer() -> AnswerClaims:
    """The answer assumed before any is stored: :data:`ASSUMED_CLAIMS` claims of
    :data:`ASSUMED_CLAIM_CHARS` characters, each citing :data:`ASSUMED_URLS_PER_CLAIM` of
    :data:`ASSUMED_URLS` destinations."""
    urls = [
        f"https://example.org/{'p' * (ASSUMED_URL_CHARS - 22)}/{n}" for n in range(ASSUMED_URLS)
    ]
    claims = tuple(
        Claim(
            n,
            "c" * ASSUMED_CLAIM_CHARS,
            tuple(urls[(n + k) % ASSUMED_URLS] for k in range(ASSUMED_URLS_PER_CLAIM)),
            (),
            0,
        )
        for n in range(ASSUMED_CLAIMS)
    )
    return AnswerClaims(0, 0, "", claims)


def answers_to_check(
    class_sizes: Mapping[str, int],
    sample: int | float | None,
    *,
    grounded_share: float,
    checked: int,
) -> int:
    """Answers the sample takes from the job's questions (``class_sizes``) at
    ``grounded_share`` grounded, less the ``checked`` ones."""
    expected = {c: round(n * grounded_share) for c, n in class_sizes.items()}
    return max(sample_size(expected, sample) - checked, 0)


def _expected_call(price: Price, shape: CallShape) -> Decimal:
    return expected_cost(
        price,
        prompt_tokens=shape.prompt_tokens,
        output_tokens=shape.pairs * ASSUMED_VERDICT_TOKENS,
        tool_use_tokens=shape.urls * ASSUMED_PAGE_TOKENS if shape.reads_pages else 0,
        tool=None,
    ).total


def _worst_call(price: Price, shape: CallShape, worst_case: WorstCase) -> int:
    if shape.reads_pages:
        return worst_case.reading_micro(price, shape.prompt_tokens)
    return worst_case.micro(price, shape.prompt_tokens, None)


def estimate_verification(
    answers: int,
    per_answer: Sequence[Sequence[CallShape]],
    price: Price | None,
    worst_case: WorstCase,
    *,
    ledger_calls: int = 0,
    ledger_spent: Decimal = Decimal(0),
    measured_on: str,
) -> VerifyEstimate:
    """The expected cost of checking ``answers`` answers shaped like ``per_answer`` (the
    calls of each answer measured on); ``ledger_calls`` verification calls already cost
    ``ledger_spent`` USD (their mean is then the cost of a call)."""
    measured = max(len(per_answer), 1)
    shapes = [s for calls in per_answer for s in calls]
    calls = Decimal(len(shapes)) / measured * answers
    basis = f"calls of {measured_on} (up to {URL_LIMIT} URLs a call)"
    if price is None:
        return VerifyEstimate(answers, calls, Decimal(0), None, basis + "; no price known")
    if ledger_calls:
        each = ledger_spent / ledger_calls
        total = each * calls
        basis += f", at the mean cost of the {ledger_calls} verification calls in the ledger"
    else:
        per = sum((_expected_call(price, s) for s in shapes), Decimal(0)) / measured
        total = per * answers
        basis += (
            f", at {price.describe()} with {ASSUMED_PAGE_TOKENS:,} input tokens a page read"
            f" and {ASSUMED_VERDICT_TOKENS} output tokens a verdict (assumed)"
        )
    worst = sum(_worst_call(price, s, worst_case) for s in shapes)
    worst_total = micro_to_usd(worst) / measured * answers
    return VerifyEstimate(answers, calls, total, worst_total, basis)


def estimate_for_job(
    claims: Sequence[AnswerClaims],
    *,
    class_sizes: Mapping[str, int],
    answered: int,
    grounded: int,
    checked: int,
    sample: int | float | None,
    model: str,
    price: Price | None,
    worst_case: WorstCase,
    ledger_calls: int = 0,
    ledger_spent: Decimal = Decimal(0),
) -> VerifyEstimate:
    """The job's figures: the answers to check from its question counts, the calls of each
    from the stored answers' ``claims`` (an assumed answer when none is stored)."""
    limit = worst_case.max_output_tokens
    if claims:
        per_answer = [shapes_of(a, model, limit) for a in claims]
        on = f"the first {len(claims)} stored answers"
    else:
        per_answer = [shapes_of(assumed_answer(), model, limit)]
        on = (
            f"an assumed answer ({ASSUMED_CLAIMS} claims citing {ASSUMED_URLS_PER_CLAIM} of"
            f" {ASSUMED_URLS} pages each; no answer stored yet)"
        )
    share = grounded / answered if answered else 1.0
    answers = answers_to_check(class_sizes, sample, grounded_share=share, checked=checked)
    return estimate_verification(
        answers,
        per_answer,
        price,
        worst_case,
        ledger_calls=ledger_calls,
        ledger_spent=ledger_spent,
        measured_on=on,
    )


def render_verification(e: VerifyEstimate, sample: str, model: str) -> list[str]:
    """The lines ``ground estimate`` and ``--dry-run`` print for ``[verify]``."""
    return [
        f"verification ([verify] sample {sample}, model {model}): {e.answers} answers to check,"
        f" ~{e.calls:.0f} calls ({e.calls_per_answer:.2f} an answer), from {e.basis}",
        f"verification expected: ${e.total:.4f}",
        *(
            []
            if e.worst_total is None
            else [
                f"verification worst case, as the budget reserves it: ${e.worst_total:.4f}"
                " (each url_context call held at the model's whole input window)"
            ]
        ),
    ]
