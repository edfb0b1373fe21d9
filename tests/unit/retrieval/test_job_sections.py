"""[retrieval], the own-retrieval fallback and the connectors' keys, checked at load with the
key named in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.job.spec import JobSpecError, load_jobspec

BASE = """
[job]
name = "t"
[source]
file = "q.jsonl"
class_field = "topic"
"""
VERTEX = '\n[model]\nbackend = "vertex"\n'


def _load(tmp_path: Path, text: str):
    path = tmp_path / "job.toml"
    path.write_text(BASE + text, encoding="utf-8")
    return load_jobspec(path)


def test_a_full_retrieval_section_loads_with_its_paths_resolved(tmp_path: Path) -> None:
    spec = _load(
        tmp_path,
        """
[grounding]
fallback = "own_retrieval"
fallback_classes = ["airports"]
fallback_when = "ungrounded"
fallback_below = 0.6
[retrieval]
docs = "corpus/docs.jsonl"
chunk_chars = 800
chunk_overlap = 100
top_k = 4
min_score = 0.2
dense = true
embedding_model = "gemini-embedding-001"
""",
    )
    assert spec.retrieval.docs == str(tmp_path / "corpus" / "docs.jsonl")
    assert spec.grounding.fallback_classes == ("airports",)
    assert spec.retrieval.top_k == 4 and spec.retrieval.dense


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[grounding]\nfallback = "own_retrieval"\nfallback_when = "ungrounded"\n',
            "grounding.fallback: own_retrieval needs a [retrieval] section",
        ),
        (
            '[grounding]\nfallback = "own_retrieval"\n[retrieval]\ndocs = "d.jsonl"\n',
            "grounding.fallback: say when",
        ),
        (
            '[grounding]\nfallback = "own_retrieval"\nfallback_classes = ["a", "a"]\n'
            '[retrieval]\ndocs = "d.jsonl"\n',
            "grounding.fallback_classes: a class is listed twice",
        ),
        ('[grounding]\nfallback = "sometimes"\n', "grounding.fallback"),
        ("[grounding]\nfallback_below = 1.5\n", "grounding.fallback_below"),
        (
            '[retrieval]\ndocs = "d.jsonl"\nquery = "SELECT 1"\nurl = "sqlite:///x"\n',
            "retrieval: give either docs or query",
        ),
        ('[retrieval]\nquery = "SELECT 1"\n', "retrieval.url: required with retrieval.query"),
        (
            '[retrieval]\ndocs = "d.jsonl"\nchunk_chars = 200\nchunk_overlap = 200\n',
            "retrieval.chunk_overlap: must be less than chunk_chars",
        ),
        ('[retrieval]\ndocs = "d.jsonl"\ntop_k = 0\n', "retrieval.top_k"),
        ('[retrieval]\ndocs = "d.jsonl"\nmin_score = 1.0\n', "retrieval.min_score"),
        ('[retrieval]\ndocs = "d.jsonl"\nlanguage = "en"\n', "retrieval.language: unknown key"),
        ('[grounding]\ntool = "elasticsearch"\n', 'elasticsearch needs model.backend = "vertex"'),
        (
            VERTEX + '[grounding]\ntool = "elasticsearch"\n',
            "grounding.elasticsearch_endpoint: required for elasticsearch",
        ),
        (
            VERTEX + '[grounding]\ntool = "elasticsearch"\nelasticsearch_endpoint = "es:9200"\n'
            'elasticsearch_index = "kb"\nelasticsearch_search_template = "t"\n',
            "grounding.elasticsearch_endpoint: must start with https://",
        ),
        (
            VERTEX + '[grounding]\ntool = "elasticsearch"\nelasticsearch_endpoint = "https://es"\n'
            'elasticsearch_index = "kb"\nelasticsearch_search_template = "t"\n'
            'elasticsearch_api_key_env = "ApiKey abc"\n',
            "grounding.elasticsearch_api_key_env",
        ),
        (
            VERTEX + '[grounding]\ntool = "vertex_rag_store"\nrag_corpus = "my-corpus"\n',
            "grounding.rag_corpus: vertex_rag_store needs a corpus",
        ),
        (
            VERTEX + '[grounding]\ntool = ["vertex_rag_store", "google_search"]\n'
            'rag_corpus = "projects/p/locations/l/ragCorpora/1"\n',
            "vertex_rag_store cannot be combined",
        ),
    ],
)
def test_bad_keys_are_refused_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(JobSpecError) as caught:
        _load(tmp_path, text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_own_retrieval_loads_in_batch_mode(tmp_path: Path) -> None:
    spec = _load(
        tmp_path,
        '[model]\nmode = "batch"\n[grounding]\nfallback = "own_retrieval"\n'
        'fallback_classes = ["airports"]\nfallback_when = "ungrounded"\n'
        '[retrieval]\ndocs = "d.jsonl"\n',
    )
    assert spec.model.mode == "batch" and spec.grounding.fallback == "own_retrieval"


def test_fallback_classes_need_a_class_field(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(
        '[job]\nname = "t"\n[source]\nfile = "q.jsonl"\n[grounding]\nfallback = "own_retrieval"\n'
        'fallback_classes = ["a"]\n[retrieval]\ndocs = "d.jsonl"\n',
        encoding="utf-8",
    )
    with pytest.raises(JobSpecError, match=r"fallback_classes: needs source\.class_field"):
        load_jobspec(path)


def test_the_connectors_load_on_vertex(tmp_path: Path) -> None:
    spec = _load(
        tmp_path,
        VERTEX + '[grounding]\ntool = ["google_search", "elasticsearch"]\n'
        'elasticsearch_endpoint = "https://es.example:9243"\nelasticsearch_index = "kb"\n'
        'elasticsearch_search_template = "google-template-knn"\nelasticsearch_num_hits = 20\n'
        'elasticsearch_api_key_env = "ELASTIC_API_KEY"\n',
    )
    assert spec.grounding.tools == ("google_search", "elasticsearch")


def test_the_elasticsearch_key_is_read_from_its_variable_at_call_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.gemini.endpoint import ConfigurationError
    from pipeline.job.grounded_request import grounding_tools

    spec = _load(
        tmp_path,
        VERTEX
        + '[grounding]\ntool = "elasticsearch"\nelasticsearch_endpoint = "https://es.example"\n'
        'elasticsearch_index = "kb"\nelasticsearch_search_template = "t"\n'
        'elasticsearch_api_key_env = "ELASTIC_API_KEY"\n',
    )
    monkeypatch.delenv("ELASTIC_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="ELASTIC_API_KEY is not set"):
        grounding_tools(spec.grounding)
    monkeypatch.setenv("ELASTIC_API_KEY", "k3y")
    (tool,) = grounding_tools(spec.grounding)
    external = tool["retrieval"]["externalApi"]
    assert external["apiAuth"] == {"apiKeyConfig": {"apiKeyString": "ApiKey k3y"}}
    assert "k3y" not in spec.path.read_text()
