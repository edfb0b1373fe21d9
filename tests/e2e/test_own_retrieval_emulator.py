"""Against the emulator: an own-retrieval call answered with citations to its passages, the
embeddings endpoints, the two connectors' request shapes and chunks, and the class-keyed
share of managed misses."""

from __future__ import annotations

import orjson
import pytest
import requests

from pipeline.emulator.config import EmulatorConfig, config_from_mapping
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.request import (
    ElasticsearchTool,
    GroundedRequestBuilder,
    PassagesRequestBuilder,
    RagStoreTool,
    grounding_tool,
)
from pipeline.gemini.wire import decode_response
from pipeline.grounding.mapping import ground_answer
from pipeline.retrieval.answer import OwnRequest, own_answer
from pipeline.retrieval.markers import Passage
from pipeline.retrieval.prompt import passages_block

PASSAGES = (
    Passage("krk", "Kraków airports", "https://kb.example/krk", "Balice airport is 11 km west."),
    Passage("ktw", "Katowice airport", "https://kb.example/ktw", "Katowice is 100 km away."),
    Passage("zrh", "Zürich airport", None, "Zürich Airport is 13 km north of the centre."),
)


def _post(url: str, body: bytes, headers: dict[str, str]) -> dict:
    response = requests.post(url, data=body, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_passages_prompt_is_answered_citing_them_deterministically() -> None:
    builder = PassagesRequestBuilder(
        prompt_template="{question}", temperature=0.0, max_output_tokens=256
    )
    seen = set()
    with running_emulator(EmulatorConfig(seed=5)) as emu:
        url = f"{emu.base_url}/v1beta/models/gemini-3.8-flash:generateContent"
        headers = {"x-goog-api-key": emu.api_key, "content-type": "application/json"}
        for i in range(12):
            question = f"Which airports serve Kraków? ({i})"
            body = builder.body(question, passages_block(PASSAGES))
            first = _post(url, body, headers)
            raw = orjson.dumps(first)
            # Same seed, same prompt: the same answer (only responseId differs).
            assert _post(url, body, headers)["candidates"] == first["candidates"]
            response = decode_response(raw)
            assert response.candidates[0].grounding_metadata is None
            request = OwnRequest(body, PASSAGES, "airports serve kraków")
            answer = own_answer(response, request)
            assert answer.grounded and answer.citations
            assert "[" not in answer.text and "【" not in answer.text
            for c in answer.citations:
                assert answer.text[c.start : c.end] == c.text
                assert all(0 <= i < len(PASSAGES) for i in c.chunk_indices)
                seen.update(c.chunk_indices)
            assert {s.kind for s in answer.sources} == {"own"}
            assert answer.retrieval_queries == ("airports serve kraków",)
    assert len(seen) >= 2  # different questions cite different passages


def test_embeddings_are_deterministic_unit_vectors_in_request_order() -> None:
    with running_emulator(EmulatorConfig(seed=1)) as emu:
        base = f"{emu.base_url}/v1beta/models/gemini-embedding-001"
        headers = {"x-goog-api-key": emu.api_key}
        texts = ["Kraków airport", "Kraków airport", "University of Lisbon"]
        body = {
            "requests": [
                {
                    "model": "models/gemini-embedding-001",
                    "content": {"parts": [{"text": t}]},
                    "taskType": "RETRIEVAL_DOCUMENT",
                    "outputDimensionality": 32,
                }
                for t in texts
            ]
        }
        out = _post(f"{base}:batchEmbedContents", orjson.dumps(body), headers)
        vectors = [e["values"] for e in out["embeddings"]]
        assert [len(v) for v in vectors] == [32, 32, 32]
        assert vectors[0] == vectors[1] != vectors[2]
        assert abs(sum(x * x for x in vectors[0]) - 1) < 1e-5
        single = _post(
            f"{base}:embedContent",
            orjson.dumps({"content": {"parts": [{"text": texts[0]}]}, "outputDimensionality": 32}),
            headers,
        )
        assert single["embedding"]["values"] == vectors[0]
        bad = requests.post(
            f"{base}:batchEmbedContents", data=b'{"requests": []}', headers=headers, timeout=10
        )
        assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_the_connector_tools_have_the_vertex_shapes() -> None:
    es = grounding_tool(
        "elasticsearch",
        elasticsearch=ElasticsearchTool(
            "https://es.example:9243", "kb", "google-template-knn", num_hits=10, api_key="s3cr3t"
        ),
    )
    assert es == {
        "retrieval": {
            "externalApi": {
                "apiSpec": "ELASTIC_SEARCH",
                "endpoint": "https://es.example:9243",
                "apiAuth": {"apiKeyConfig": {"apiKeyString": "ApiKey s3cr3t"}},
                "elasticSearchParams": {
                    "index": "kb",
                    "searchTemplate": "google-template-knn",
                    "numHits": 10,
                },
            }
        }
    }
    assert "s3cr3t" not in repr(
        ElasticsearchTool("https://es.example", "kb", "t", api_key="s3cr3t")
    )
    rag = grounding_tool(
        "vertex_rag_store",
        rag_store=RagStoreTool(
            "projects/p/locations/us-central1/ragCorpora/42",
            rag_file_ids=("f1",),
            top_k=5,
            vector_distance_threshold=0.4,
        ),
    )
    assert rag == {
        "retrieval": {
            "vertexRagStore": {
                "ragResources": [
                    {
                        "ragCorpus": "projects/p/locations/us-central1/ragCorpora/42",
                        "ragFileIds": ["f1"],
                    }
                ],
                "ragRetrievalConfig": {"topK": 5, "filter": {"vectorDistanceThreshold": 0.4}},
            }
        }
    }


@pytest.mark.parametrize("connector", ["elasticsearch", "vertex_rag_store"])
def test_connector_chunks_come_back_with_their_own_fields(connector: str) -> None:
    tool = grounding_tool(
        connector,
        elasticsearch=ElasticsearchTool("https://es.example", "kb", "tmpl"),
        rag_store=RagStoreTool("projects/p/locations/l/ragCorpora/7"),
    )
    builder = GroundedRequestBuilder(
        tool=tool, prompt_template="{question}", temperature=1.0, max_output_tokens=256
    )
    with running_emulator(EmulatorConfig(seed=2, ungrounded_share=0.0)) as emu:
        url = (
            f"{emu.base_url}/v1/projects/p/locations/us-central1/publishers/google/models/"
            "gemini-3.8-flash:generateContent"
        )
        headers = {"Authorization": f"Bearer {emu.bearer_token}"}
        raw = orjson.dumps(_post(url, builder.body("What is the population of Kraków?"), headers))
        # The Developer API has no retrieval tool: refused as Google's parser refuses it.
        dev = requests.post(
            f"{emu.base_url}/v1beta/models/gemini-3.8-flash:generateContent",
            data=builder.body("x"),
            headers={"x-goog-api-key": emu.api_key},
            timeout=10,
        )
        assert dev.status_code == 400
    wire = orjson.loads(raw)["candidates"][0]["groundingMetadata"]
    answer = ground_answer(decode_response(raw).candidates[0])
    assert answer.grounded and answer.citations and wire["retrievalQueries"]
    contexts = [c["retrievedContext"] for c in wire["groundingChunks"] if c]
    assert contexts
    sources = [s for s in answer.sources if s.kind == "retrievedContext"]
    if connector == "vertex_rag_store":
        assert all("ragChunk" in c and "pageSpan" in c["ragChunk"] for c in contexts)
        assert all(s.first_page is not None and s.last_page >= s.first_page for s in sources)
        assert all(s.uri.startswith("gs://") and s.text for s in sources)
    else:
        assert all("ragChunk" not in c and "documentName" not in c for c in contexts)
        assert all(s.first_page is None and s.uri.startswith("https://") for s in sources)


def test_a_chosen_class_misses_on_the_managed_path_and_others_do_not() -> None:
    config = config_from_mapping(
        {
            "seed": 4,
            "ungrounded_share": 0.0,
            "miss_words": ["airports"],
            "miss_ungrounded_share": 0.5,
            "miss_chunkless_share": 0.5,
        }
    )
    builder = GroundedRequestBuilder(
        tool={"googleSearch": {}},
        prompt_template="{question}",
        temperature=1.0,
        max_output_tokens=256,
    )
    outcomes = {"ungrounded": 0, "chunkless": 0, "grounded": 0}
    with running_emulator(config) as emu:
        url = f"{emu.base_url}/v1beta/models/gemini-3.8-flash:generateContent"
        headers = {"x-goog-api-key": emu.api_key}
        for i in range(20):
            raw = _post(url, builder.body(f"Which airports serve city {i}?"), headers)
            gm = raw["candidates"][0].get("groundingMetadata")
            if gm is None:
                outcomes["ungrounded"] += 1
            elif not gm.get("groundingChunks"):
                outcomes["chunkless"] += 1
            else:
                outcomes["grounded"] += 1
            other = _post(url, builder.body(f"What is the population of city {i}?"), headers)
            assert other["candidates"][0]["groundingMetadata"]["groundingChunks"]
    assert outcomes["grounded"] == 0
    assert outcomes["ungrounded"] > 0 and outcomes["chunkless"] > 0
