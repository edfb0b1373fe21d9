"""pipeline.costs: the price table, per-call costs and worst cases."""

from __future__ import annotations

import datetime as dt
import warnings
from decimal import Decimal
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.costs.charges import (
    ZERO_COST,
    Cost,
    ToolCharge,
    billed_queries,
    call_cost,
    expected_cost,
    worst_case_cost,
)
from pipeline.costs.prices import (
    GroundingFee,
    Price,
    PriceError,
    PriceField,
    PriceTable,
    UnconfirmedPriceWarning,
    _Row,
    load_prices,
    parse_prices,
)
from pipeline.gemini.wire import (
    GroundingChunk,
    GroundingMetadata,
    MapsChunk,
    UsageMetadata,
    decode_response,
)
from pipeline.rows import CallRecord
from tests.support.paths import REPO

D = Decimal
PRICES = REPO / "pipeline" / "costs" / "prices.toml"


@pytest.fixture(scope="module")
def table() -> PriceTable:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        return load_prices()


def _price(**overrides) -> Price:
    fields = {
        "match": "m",
        "backend": "developer",
        "input_per_1m": D("1.00"),
        "output_per_1m": D("10.00"),
        "as_of": "2026-10-07",
        "source": "test",
    }
    fields.update(overrides)
    return Price(**fields)


def _table(body: str) -> PriceTable:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        return parse_prices(body.encode(), "test.toml")


# --- the table --------------------------------------------------------------------------------


def test_every_row_loads_with_date_and_source(table: PriceTable) -> None:
    assert len(table.rows) >= 20
    for row in table.rows:
        assert row.as_of
        assert row.source
        assert row.backend in {"developer", "vertex", "any"}
        assert row.input_per_1m > 0
        if row.match.startswith("gemini-embedding"):
            assert row.output_per_1m == 0  # an embedding has no output tokens
            continue
        assert row.output_per_1m > 0
        assert row.grounding, row.describe()
        for fee in row.grounding.values():
            assert fee.source
            assert fee.kind in {"per_prompt", "per_query", "none"}
            assert fee.kind != "none" or fee.usd_per_1k == 0
        if row.as_of != "undated":
            dt.date.fromisoformat(row.as_of)
        if row.long_context_above is not None:
            assert row.input_per_1m_long is not None
            assert row.output_per_1m_long is not None


def test_the_shipped_file_warns_about_placeholders() -> None:
    with pytest.warns(UnconfirmedPriceWarning, match="unconfirmed placeholder") as record:
        table = load_prices(PRICES)
    message = str(record[0].message)
    for row in table.unconfirmed():
        assert row.describe() in message
    assert any(row.source == "unconfirmed" for row in table.unconfirmed())


def test_grounding_fees_match_the_reference(table: PriceTable) -> None:
    """3.x $14/1K queries, 2.5 $35/1K prompts, Maps $25/1K, on both backends
    (``docs/wire-format.md`` "Pricing and limits")."""
    on = dt.date(2026, 11, 1)
    for backend in ("developer", "vertex"):
        for model in ("gemini-3.5-flash", "gemini-3-pro-preview", "gemini-3.1-flash-lite"):
            fee = table.for_model(model, backend, on=on).fee("google_search")
            assert (fee.kind, fee.usd_per_1k) == ("per_query", D(14)), (model, backend)
        for model in ("gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.0-flash-001"):
            fee = table.for_model(model, backend, on=on).fee("google_search")
            assert (fee.kind, fee.usd_per_1k) == ("per_prompt", D(35)), (model, backend)
    maps = table.for_model("gemini-2.5-flash", "developer").fee("google_maps")
    assert (maps.kind, maps.usd_per_1k) == ("per_prompt", D(25))
    datastore = table.for_model("gemini-2.5-flash", "vertex").fee("vertex_ai_search")
    assert datastore is not None
    assert table.for_model("gemini-2.5-flash", "developer").fee("vertex_ai_search") is None


def test_prefix_matching(table: PriceTable) -> None:
    def match(model: str, backend: str = "developer", **kw) -> str | None:
        row = table.for_model(model, backend, **kw)
        return None if row is None else f"{row.match}/{row.backend}"

    assert match("gemini-2.5-flash") == "gemini-2.5-flash/developer"
    assert match("gemini-2.5-flash-lite") == "gemini-2.5-flash-lite/developer"  # longest wins
    assert match("gemini-2.5-flash-preview-09-2025") == "gemini-2.5-flash/developer"
    assert match("models/gemini-2.5-flash") == "gemini-2.5-flash/developer"
    assert match("publishers/google/models/gemini-2.5-pro", "vertex") == "gemini-2.5-pro/vertex"
    assert match("gemini-2.5-flash@001", "vertex") == "gemini-2.5-flash/vertex"
    assert match("GEMINI-2.5-FLASH") == "gemini-2.5-flash/developer"
    assert match("gemini-3-pro-preview") == "gemini-3-pro/developer"
    assert match("gemini-3.5-flash") == "gemini-3.5-flash/developer"  # not "gemini-3..."
    assert match("gemini-2.5-flashy") is None  # a prefix matches at a boundary only
    assert match("gemini-4-ultra") is None
    assert match("gemini-2.5-flash", "batch") is None


def test_dated_rows(table: PriceTable) -> None:
    before = table.for_model("gemini-3.8-flash", "developer", on=dt.date(2026, 12, 31))
    after = table.for_model("gemini-3.8-flash", "developer", on=dt.date(2027, 1, 1))
    assert (before.input_per_1m, before.output_per_1m) == (D("0.75"), D("3.75"))
    assert (after.input_per_1m, after.output_per_1m) == (D("1.50"), D("7.50"))


def test_exact_backend_beats_any() -> None:
    t = _table(
        """
[[price]]
match = "gemini-x"
backend = "any"
input_per_1m = 1
output_per_1m = 1
as_of = 2026-01-01
source = "a"
[[price]]
match = "gemini-x"
backend = "vertex"
input_per_1m = 2
output_per_1m = 2
as_of = 2026-01-01
source = "b"
"""
    )
    assert t.for_model("gemini-x", "vertex").source == "b"
    assert t.for_model("gemini-x", "developer").source == "a"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[[price]]\nmatch='m'\n", r"price\[0\]\.backend"),
        (
            "[[price]]\nmatch='m'\nbackend='developer'\ninput_per_1m=1\noutput_per_1m=1\n"
            "as_of=2026-01-01\nsource='s'\ninput_per_m=3\n",
            r"price\[0\]: unknown key\(s\) input_per_m",
        ),
        (
            "[[price]]\nmatch='m'\nbackend='developer'\ninput_per_1m=-1\noutput_per_1m=1\n"
            "as_of=2026-01-01\nsource='s'\n",
            r"price\[0\]\.input_per_1m: expected a non-negative",
        ),
        (
            "[[price]]\nmatch='m'\nbackend='developer'\ninput_per_1m=1\noutput_per_1m=1\n"
            "as_of=2026-01-01\nsource='s'\n[price.grounding.google_search]\nkind='per_call'\n"
            "usd_per_1k=1\nsource='s'\n",
            r"grounding\.google_search\.kind",
        ),
        (
            "[[price]]\nmatch='m'\nbackend='developer'\ninput_per_1m=1\noutput_per_1m=1\n"
            "source='s'\n",
            r"price\[0\]\.as_of",
        ),
        ("price = [", "test.toml"),
        (
            "[[price]]\nmatch='m'\nbackend='developer'\ninput_per_1m=1\noutput_per_1m=1\n"
            "as_of=2026-01-01\nsource='s'\nunconfirmed=['input_per_1m', 'input']\n",
            r"^test\.toml: price\[0\]\.unconfirmed\[1\]: invalid enum value 'input'$",
        ),
        (
            "[[price]]\nmatch='m'\nbackend='developer'\ninput_per_1m=1\noutput_per_1m=1\n"
            "as_of=2026-01-01\nsource='s'\n[price.grounding.google_serch]\n",
            r"price\[0\]\.grounding: unknown key\(s\) google_serch",
        ),
        (
            "[[tool_fee]]\ntool='vertex_ai_search'\nkind='per_query'\nusd_per_1k=inf\nsource='s'\n",
            r"tool_fee\[0\]\.usd_per_1k: expected a non-negative number",
        ),
        (
            "[[price]]\nmatch='m'\nbackend='developer'\ninput_per_1m=true\noutput_per_1m=1\n"
            "as_of=2026-01-01\nsource='s'\n",
            r"price\[0\]\.input_per_1m: expected a number, got True",
        ),
        ("", r"test\.toml: no \[\[price\]\] rows"),
    ],
)
def test_malformed_rows_name_the_place(body: str, message: str) -> None:
    with pytest.raises(PriceError, match=message):
        parse_prices(body.encode(), "test.toml")


def test_prices_are_exact_decimals(table: PriceTable) -> None:
    """Read as written in the file, never through float: 0.10 is exactly 1/10."""
    for row in table.rows:
        assert type(row.input_per_1m) is Decimal
        assert type(row.as_of) is str
        for fee in row.grounding.values():
            assert type(fee.usd_per_1k) is Decimal
    assert table.for_model("gemini-2.0-flash", "developer").input_per_1m == D("0.10")


def test_unconfirmed_may_name_every_row_key_and_only_those() -> None:
    assert set(get_args(PriceField)) == set(_Row.__struct_fields__)


def test_missing_file_is_a_price_error(tmp_path: Path) -> None:
    with pytest.raises(PriceError, match=r"nope\.toml"):
        load_prices(tmp_path / "nope.toml")


# --- call_cost --------------------------------------------------------------------------------


def _fee(kind: str, usd: int) -> dict:
    return {"google_search": GroundingFee(kind, D(usd), source="test")}


PER_PROMPT = _price(grounding=_fee("per_prompt", 35))
PER_QUERY = _price(grounding=_fee("per_query", 14))


def test_tokens_tool_use_as_input_thinking_as_output() -> None:
    usage = UsageMetadata(
        prompt_token_count=17,
        candidates_token_count=20,
        tool_use_prompt_token_count=308,
        thoughts_token_count=333,
        total_token_count=678,  # the vercel/ai fixture in docs/wire-format.md
    )
    cost = call_cost(PER_PROMPT, usage, None)
    assert cost.input_tokens == 17 + 308
    assert cost.output_tokens == 20 + 333
    assert cost.input_usd == D(325) * D("1.00") / 1_000_000
    assert cost.output_usd == D(353) * D("10.00") / 1_000_000
    assert cost.grounding_usd == 0  # not grounded: no fee
    assert cost.total == D("0.003855")
    assert cost.micro_usd() == 3855


def test_per_prompt_fee_once_however_many_queries() -> None:
    usage = UsageMetadata(prompt_token_count=10)
    grounded = GroundingMetadata(web_search_queries=("a", "b", "c"))
    cost = call_cost(PER_PROMPT, usage, grounded)
    assert cost.grounding_units == 1
    assert cost.grounding_usd == D("0.035")
    # grounding metadata present but no queries listed: still one grounded prompt
    assert call_cost(PER_PROMPT, usage, GroundingMetadata()).grounding_usd == D("0.035")


def test_the_interactions_search_count_is_billed_when_it_is_the_larger() -> None:
    usage = UsageMetadata(prompt_token_count=10)
    # usage.grounding_tool_count (Interactions API), kept beside the queries by the mapper
    more = GroundingMetadata(web_search_queries=("a", "a"), grounding_tool_count=3)
    assert call_cost(PER_QUERY, usage, more).grounding_units == 3
    fewer = GroundingMetadata(web_search_queries=("a", "b"), grounding_tool_count=1)
    assert call_cost(PER_QUERY, usage, fewer).grounding_units == 2
    assert call_cost(PER_PROMPT, usage, more).grounding_units == 1


def test_per_query_fee_counts_non_empty_queries_only() -> None:
    usage = UsageMetadata(prompt_token_count=10)
    grounded = GroundingMetadata(web_search_queries=("weather paris", "", "  ", "tokyo"))
    cost = call_cost(PER_QUERY, usage, grounded)
    assert cost.grounding_units == 2
    assert cost.grounding_usd == D("0.028")
    assert (
        call_cost(PER_QUERY, usage, GroundingMetadata(web_search_queries=("",))).grounding_usd == 0
    )


def test_gemini_3_bills_distinct_non_empty_queries(table: PriceTable) -> None:
    """The acceptance case: ``["a", "a", "", " b"]`` is 2 units on a per-query row (3.x);
    queries are compared as sent (not trimmed), blanks are empty; 2.x keeps one per prompt."""
    usage = UsageMetadata(prompt_token_count=10)
    queries = GroundingMetadata(web_search_queries=("a", "a", "", " b"))
    assert billed_queries(("a", "a", "", " b")) == 2
    assert billed_queries(("b", " b", "b ", "   ")) == 3  # exact strings: an upper bound
    assert billed_queries(()) == 0
    gemini_3 = table.for_model("gemini-3-flash-preview", "developer", on=dt.date(2026, 11, 1))
    cost = call_cost(gemini_3, usage, queries)
    assert (cost.grounding_units, cost.grounding_usd) == (2, D("0.028"))
    gemini_25 = table.for_model("gemini-2.5-flash", "developer")
    older = call_cost(gemini_25, usage, queries)
    assert (older.grounding_units, older.grounding_usd) == (1, D("0.035"))
    assert call_cost(PER_QUERY, usage, queries).grounding_units == 2


def test_maps_is_priced_as_its_own_line(table: PriceTable) -> None:
    """Maps has its own fee ($25 / 1,000 grounded prompts) on every model of both backends,
    a line of its own beside Search's in a response that used both tools."""
    on = dt.date(2026, 11, 1)
    for model in ("gemini-3-flash-preview", "gemini-3.1-pro-preview", "gemini-2.5-flash"):
        for backend in ("developer", "vertex"):
            fee = table.for_model(model, backend, on=on).fee("google_maps")
            assert (fee.kind, fee.usd_per_1k) == ("per_prompt", D(25)), (model, backend)
            assert fee.source
    assert not table.for_model("gemini-3-flash", "vertex", on=on).fee("google_maps").confirmed
    assert table.for_model("gemini-3-flash", "developer", on=on).fee("google_maps").confirmed
    price = table.for_model("gemini-3-flash-preview", "developer", on=on)
    both = GroundingMetadata(
        web_search_queries=("cafes near Wawel", "cafes near Wawel", "opening hours"),
        grounding_chunks=(GroundingChunk(maps=MapsChunk(title="Cafe", place_id="places/1")),),
    )
    usage = UsageMetadata(prompt_token_count=10)
    cost = call_cost(price, usage, both, tool=("google_search", "google_maps"))
    assert cost.charge("google_maps") == ToolCharge("google_maps", "per_prompt", 1, D("0.025"))
    assert cost.charge("google_search") == ToolCharge("google_search", "per_query", 2, D("0.028"))
    assert (cost.grounding_units, cost.grounding_usd) == (3, D("0.053"))
    assert cost.complete
    # Maps alone, without a place in the answer: one grounded prompt all the same.
    alone = call_cost(price, usage, GroundingMetadata(), tool="google_maps")
    assert alone.charges == (ToolCharge("google_maps", "per_prompt", 1, D("0.025")),)
    # Search alone used: no Maps line.
    search_only = GroundingMetadata(web_search_queries=("a",))
    used = call_cost(price, usage, search_only, tool=("google_search", "google_maps"))
    assert used.charge("google_maps") is None


def test_a_response_with_no_candidates_is_billed_for_its_tokens(table: PriceTable) -> None:
    """A blocked prompt (no candidates, as sent on the wire) still bills its tokens: the
    ledger row carries them and their price; no grounding fee without groundingMetadata."""
    body = (
        b'{"promptFeedback": {"blockReason": "SAFETY"},'
        b' "usageMetadata": {"promptTokenCount": 1200, "toolUsePromptTokenCount": 300,'
        b' "thoughtsTokenCount": 40, "totalTokenCount": 1540}}'
    )
    response = decode_response(body)
    assert response.candidates == ()
    price = table.for_model("gemini-2.5-flash", "developer")
    grounding = response.candidates[0].grounding_metadata if response.candidates else None
    cost = call_cost(price, response.usage_metadata, grounding)
    assert (cost.input_tokens, cost.output_tokens, cost.grounding_units) == (1500, 40, 0)
    assert cost.total == D(1500) * D("0.30") / 1_000_000 + D(40) * D("2.50") / 1_000_000
    record = CallRecord.answered(
        1,
        "ground",
        "gemini-2.5-flash",
        dt.datetime(2026, 12, 3, tzinfo=dt.UTC),
        5.0,
        response.usage_metadata,
        cost,
    )
    assert (record.input_tokens, record.output_tokens) == (1500, 40)
    assert record.cost_micro_usd == cost.micro_usd() > 0
    assert record.cost_complete


def test_no_tool_or_unknown_fee() -> None:
    usage = UsageMetadata(prompt_token_count=10)
    grounded = GroundingMetadata(web_search_queries=("a",))
    assert call_cost(PER_QUERY, usage, grounded, tool=None).grounding_usd == 0
    maps = call_cost(PER_QUERY, usage, grounded, tool="google_maps")
    assert maps.complete is False
    assert maps.grounding_usd == 0


def test_datastore_grounding_is_priced_per_grounded_prompt(table: PriceTable) -> None:
    """Vertex AI Search grounding: $2.50 per 1,000 grounded prompts, dated and sourced; one
    unit per grounded response however many retrieval queries it ran."""
    price = table.for_model("gemini-2.5-flash", "vertex")
    fee = price.fee("vertex_ai_search")
    assert (fee.kind, fee.usd_per_1k) == ("per_prompt", D("2.50"))
    assert fee.as_of == "2026-12-01" and fee.source.startswith("https://cloud.google.com/")
    usage = UsageMetadata(prompt_token_count=0)
    one = call_cost(price, usage, GroundingMetadata(), tool="vertex_ai_search")
    two = call_cost(
        price, usage, GroundingMetadata(retrieval_queries=("a", "", "b")), tool="vertex_ai_search"
    )
    assert (one.grounding_units, one.grounding_usd) == (1, D("0.0025"))
    assert (two.grounding_units, two.grounding_usd) == (1, D("0.0025"))


def test_a_jobs_prices_file_overrides_the_datastore_fee() -> None:
    table = parse_prices(
        b"""
[[tool_fee]]
tool = "vertex_ai_search"
backend = "vertex"
kind = "per_query"
usd_per_1k = 4
as_of = 2026-12-02
source = "our contract"

[[price]]
match = "gemini-2.5-flash"
backend = "vertex"
input_per_1m = 0.30
output_per_1m = 2.50
as_of = 2026-04-13
source = "test"
""",
        "job-prices.toml",
    )
    fee = table.for_model("gemini-2.5-flash", "vertex").fee("vertex_ai_search")
    assert (fee.kind, fee.usd_per_1k, fee.as_of) == ("per_query", D(4), "2026-12-02")


def test_vertex_batch_halves_tokens_not_grounding(table: PriceTable) -> None:
    online = table.for_model("gemini-2.5-flash", "vertex")
    batch = table.for_batch("gemini-2.5-flash", "vertex")
    assert batch.input_per_1m == online.input_per_1m / 2
    assert batch.output_per_1m == online.output_per_1m / 2
    assert batch.fee("vertex_ai_search").usd_per_1k == D("2.50")


def test_cached_and_long_context_rates() -> None:
    price = _price(
        cached_input_per_1m=D("0.10"),
        long_context_above=200_000,
        input_per_1m_long=D("2.00"),
        output_per_1m_long=D("15.00"),
    )
    cached = call_cost(
        price,
        UsageMetadata(prompt_token_count=1000, cached_content_token_count=400),
        None,
    )
    assert cached.input_usd == (D(600) * 1 + D(400) * D("0.10")) / 1_000_000
    long = call_cost(
        price,
        UsageMetadata(
            prompt_token_count=199_000, tool_use_prompt_token_count=2000, candidates_token_count=10
        ),
        None,
    )
    assert long.input_usd == D(201_000) * 2 / 1_000_000  # search results push it over 200k
    assert long.output_usd == D(10) * 15 / 1_000_000


def test_real_price_row_example(table: PriceTable) -> None:
    price = table.for_model("gemini-2.5-flash", "developer")
    usage = UsageMetadata(
        prompt_token_count=1000,
        candidates_token_count=500,
        tool_use_prompt_token_count=2000,
        thoughts_token_count=300,
    )
    cost = call_cost(price, usage, GroundingMetadata(web_search_queries=("q",)))
    # 3000 input at $0.30/1M + 800 output at $2.50/1M + one grounded prompt at $35/1K
    assert cost.total == D("0.0009") + D("0.002") + D("0.035")


def test_cost_total_and_micro_usd_rounds_up() -> None:
    a = Cost(input_usd=D("0.0000001"), input_tokens=1)
    assert a.micro_usd() == 1
    assert ZERO_COST.micro_usd() == 0
    parts = Cost(input_usd=D("0.0000001"), output_usd=D("0.0000001"), grounding_usd=D("0.014"))
    assert parts.total == D("0.0140002")
    assert parts.micro_usd() == 14001  # 14000.2 micro-dollars, rounded up


# --- worst case -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["per_prompt", "per_query"]),
    prompt=st.integers(0, 300_000),
    max_out=st.integers(0, 70_000),
    max_queries=st.integers(0, 20),
    max_tool=st.integers(0, 50_000),
    data=st.data(),
)
def test_worst_case_bounds_every_call_within_its_assumptions(
    kind: str, prompt: int, max_out: int, max_queries: int, max_tool: int, data: st.DataObject
) -> None:
    price = _price(
        grounding=_fee(kind, 35),
        cached_input_per_1m=D("0.1"),
        long_context_above=200_000,
        input_per_1m_long=D("2.00"),
        output_per_1m_long=D("15.00"),
    )
    worst = worst_case_cost(
        price,
        prompt_tokens_estimate=prompt,
        max_output_tokens=max_out,
        max_search_queries=max_queries,
        max_tool_use_tokens=max_tool,
    )
    actual_prompt = data.draw(st.integers(0, prompt))
    candidates = data.draw(st.integers(0, max_out))
    usage = UsageMetadata(
        prompt_token_count=actual_prompt,
        cached_content_token_count=data.draw(st.integers(0, actual_prompt)),
        tool_use_prompt_token_count=data.draw(st.integers(0, max_tool)),
        candidates_token_count=candidates,
        thoughts_token_count=data.draw(st.integers(0, max_out - candidates)),
    )
    queries = data.draw(st.lists(st.sampled_from(["q", "", "other"]), max_size=max(max_queries, 1)))
    grounding = data.draw(
        st.sampled_from([None, GroundingMetadata(web_search_queries=tuple(queries))])
    )
    assert call_cost(price, usage, grounding).total <= worst.total


def test_worst_case_needs_a_known_fee() -> None:
    with pytest.raises(ValueError, match="no grounding fee for google_maps"):
        worst_case_cost(
            PER_QUERY,
            prompt_tokens_estimate=10,
            max_output_tokens=10,
            max_search_queries=1,
            tool="google_maps",
        )
    ungrounded = worst_case_cost(
        PER_QUERY, prompt_tokens_estimate=10, max_output_tokens=10, max_search_queries=5, tool=None
    )
    assert ungrounded.grounding_usd == 0
    assert ungrounded.input_tokens == 10  # no search results without a tool


def test_expected_cost(table: PriceTable) -> None:
    price = table.for_model("gemini-3.5-flash", "developer")
    one = expected_cost(
        price, prompt_tokens=100, output_tokens=400, tool_use_tokens=900, search_queries=2.5
    )
    assert one.total == D(1000) * D("1.50") / 1_000_000 + D(400) * 9 / 1_000_000 + D("0.035")
    half = expected_cost(
        price, prompt_tokens=0, output_tokens=0, search_queries=2, grounded_share=0.5
    )
    assert half.grounding_usd == D("0.014")
