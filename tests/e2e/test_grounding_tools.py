"""[grounding] tool as configuration: request bodies, load-time refusals (0 calls), fees."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from pipeline.cli import main
from pipeline.costs.charges import call_cost, worst_case_cost
from pipeline.costs.prices import load_prices, parse_prices
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.request import grounding_tool
from pipeline.gemini.wire import GroundingMetadata, UsageMetadata, decode_response
from pipeline.job.calls import request_builder
from pipeline.job.spec import JobSpecError, load_jobspec
from tests.support.jobs import generate_calls, make_job
from tests.support.paths import REPO

BASE = "http://127.0.0.1:9"  # never contacted: these jobs are only loaded


def body_of(tmp_path: Path, *overrides: str) -> dict:
    spec = make_job(tmp_path, base_url=BASE, n_questions=1, overrides=list(overrides))
    return orjson.loads(request_builder(spec).body("q"))


def test_single_and_several_tools(tmp_path: Path) -> None:
    assert body_of(tmp_path)["tools"] == [{"googleSearch": {}}]
    both = body_of(tmp_path / "b", 'grounding.tool=["google_search", "url_context"]')
    assert both["tools"] == [{"googleSearch": {}}, {"urlContext": {}}]


def test_maps_with_a_location(tmp_path: Path) -> None:
    body = body_of(tmp_path, 'grounding.tool="google_maps"', "grounding.location=[48.2, 16.37]")
    assert body["tools"] == [{"googleMaps": {}}]
    assert body["toolConfig"] == {
        "retrievalConfig": {"latLng": {"latitude": 48.2, "longitude": 16.37}}
    }


def test_vertex_tools(tmp_path: Path) -> None:
    vertex = ['model.backend="vertex"', 'model.project="p"', 'model.location="global"']
    body = body_of(
        tmp_path,
        *vertex,
        'grounding.exclude_domains=["example.com"]',
        'grounding.tool="google_search"',
    )
    assert body["tools"] == [{"googleSearch": {"excludeDomains": ["example.com"]}}]
    body = body_of(tmp_path / "e", *vertex, 'grounding.tool="enterprise_web_search"')
    assert body["tools"] == [{"enterpriseWebSearch": {}}]
    body = body_of(
        tmp_path / "v",
        *vertex,
        'grounding.tool="vertex_ai_search"',
        'grounding.engine="projects/p/locations/global/collections/c/engines/e"',
        'grounding.filter="lang: ANY(\\"en\\")"',
        "grounding.max_results=5",
    )
    assert body["tools"] == [
        {
            "retrieval": {
                "vertexAiSearch": {
                    "engine": "projects/p/locations/global/collections/c/engines/e",
                    "filter": 'lang: ANY("en")',
                    "maxResults": 5,
                }
            }
        }
    ]


def test_file_search_and_legacy_retrieval(tmp_path: Path) -> None:
    body = body_of(
        tmp_path,
        'grounding.tool="file_search"',
        'grounding.file_search_stores=["fileSearchStores/s1"]',
    )
    assert body["tools"] == [{"fileSearch": {"fileSearchStoreNames": ["fileSearchStores/s1"]}}]
    body = body_of(
        tmp_path / "l",
        'model.name="gemini-1.5-flash-002"',
        'grounding.tool="google_search_retrieval"',
        "grounding.dynamic_threshold=0.3",
    )
    assert body["tools"] == [
        {
            "googleSearchRetrieval": {
                "dynamicRetrievalConfig": {"mode": "MODE_DYNAMIC", "dynamicThreshold": 0.3}
            }
        }
    ]
    assert grounding_tool("google_search_retrieval") == {"googleSearchRetrieval": {}}


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (['grounding.tool="google_search_retrieval"'], "grounding.tool", "use google_search"),
        (
            ['model.name="gemini-3-flash-preview"', 'grounding.tool="google_search_retrieval"'],
            "grounding.tool",
            "use google_search",
        ),
        (['grounding.tool="enterprise_web_search"'], "grounding.tool", '"vertex"'),
        (['grounding.tool="file_search"'], "grounding.file_search_stores", "required"),
        (['grounding.exclude_domains=["a.com"]'], "grounding.exclude_domains", "Vertex only"),
        (
            ['grounding.tool=["file_search", "google_search"]'],
            "grounding.tool",
            "cannot be combined",
        ),
        (
            ['grounding.tool="url_context"', 'grounding.url_field="url"'],
            "grounding.url_field",
            "metadata_fields",
        ),
    ],
)
def test_refused_at_load(tmp_path: Path, overrides: list[str], key: str, words: str) -> None:
    with pytest.raises(JobSpecError) as err:
        make_job(tmp_path, base_url=BASE, n_questions=1, overrides=overrides)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'job.toml'}: {key}:")
    assert words in message


def test_legacy_tool_on_a_new_model_refused_with_zero_calls(
    tmp_path: Path, emulator_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=71)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=3)
        job = spec.path
        job.write_text(
            job.read_text() + '\n[grounding]\ntool = "google_search_retrieval"\n', encoding="utf-8"
        )
        assert main(["run", str(job)]) == 2
        stats = emu.stats()
    err = capsys.readouterr().err
    assert str(job) in err and "grounding.tool" in err and "use google_search" in err
    assert generate_calls(stats) == 0


def test_legacy_tool_accepted_for_1_5(tmp_path: Path) -> None:
    spec = make_job(
        tmp_path,
        base_url=BASE,
        n_questions=1,
        overrides=['model.name="gemini-1.5-pro-002"', 'grounding.tool="google_search_retrieval"'],
    )
    assert spec.grounding.tools == ("google_search_retrieval",)


@pytest.mark.filterwarnings("ignore::pipeline.costs.prices.UnconfirmedPriceWarning")
def test_fees_summed_per_tool_used() -> None:
    prices = load_prices()
    price = prices.for_model("gemini-2.5-flash", "developer")
    assert price is not None
    usage = UsageMetadata(prompt_token_count=10, candidates_token_count=10)
    raw = {
        "webSearchQueries": ["a"],
        "groundingChunks": [
            {"maps": {"uri": "https://maps.google.com/?cid=1", "placeId": "places/x"}}
        ],
    }
    gm = decode_response(orjson.dumps({"candidates": [{"groundingMetadata": raw}]})).candidates[0]
    metadata = gm.grounding_metadata
    assert isinstance(metadata, GroundingMetadata)
    one = call_cost(price, usage, metadata, tool="google_search")
    both = call_cost(price, usage, metadata, tool=("google_search", "google_maps"))
    maps_fee = price.fee("google_maps")
    assert maps_fee is not None
    assert both.grounding_usd == one.grounding_usd + maps_fee.usd_per_1k / Decimal(1000)
    # A declared tool the response shows no sign of adds nothing.
    no_maps = (
        decode_response(
            orjson.dumps({"candidates": [{"groundingMetadata": {"webSearchQueries": ["a"]}}]})
        )
        .candidates[0]
        .grounding_metadata
    )
    assert call_cost(price, usage, no_maps, tool=("google_search", "google_maps")) == call_cost(
        price, usage, no_maps, tool="google_search"
    )
    # url_context is known to have no fee of its own: complete, nothing added, worst case known.
    with_url = call_cost(price, usage, metadata, tool=("google_search", "url_context"))
    assert with_url.complete and with_url.grounding_usd == one.grounding_usd
    worst = {
        tools: worst_case_cost(
            price, prompt_tokens_estimate=10, max_output_tokens=10, max_search_queries=1, tool=tools
        )
        for tools in (("google_search",), ("google_search", "url_context"))
    }
    assert worst[("google_search",)] == worst[("google_search", "url_context")]
    # A tool whose fee a price table does not know: the cost is incomplete, the worst case
    # refuses (an unknown fee has no bound).
    bare = parse_prices(
        b"""
[[price]]
match = "gemini-2.5-flash"
backend = "developer"
input_per_1m = 0.30
output_per_1m = 2.50
as_of = 2026-10-07
source = "test"
[price.grounding.google_search]
kind = "per_prompt"
usd_per_1k = 35
source = "test"
"""
    ).for_model("gemini-2.5-flash", "developer")
    assert bare is not None
    assert not call_cost(bare, usage, metadata, tool=("google_search", "url_context")).complete
    with pytest.raises(ValueError, match="url_context"):
        worst_case_cost(
            bare,
            prompt_tokens_estimate=10,
            max_output_tokens=10,
            max_search_queries=1,
            tool=("google_search", "url_context"),
        )


def test_demo_job_still_loads() -> None:
    spec = load_jobspec(REPO / "jobs" / "demo.toml")
    assert spec.grounding.tools
