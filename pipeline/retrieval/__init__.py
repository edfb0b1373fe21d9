"""Your own retrieval: an index the job owns, searched lexically (and densely), and the
citations of an answer to numbered passages, constructed in the shape of Google's.

By module: ``markers`` (:func:`cite_passages`, :func:`parse_markers`, :class:`Passage`),
``prompt`` (:func:`passages_block`), ``chunking`` (:func:`chunk_spans`), ``fusion``
(:func:`reciprocal_rank_fusion`), ``documents`` (reading ``[retrieval]``'s documents),
``index`` (:func:`load_index`, :func:`embed_pending`: ``ground index``), ``query_vectors``
(:class:`QueryEmbedder`: a run's questions embedded once, for dense search), ``search``
(:func:`search`), ``answer`` (:func:`own_request`, :func:`own_answer`: one question's call
and its :class:`~pipeline.grounding.GroundedAnswer`). The SQL is in
:mod:`pipeline.store.documents`.
"""

from pipeline.retrieval.answer import NOTHING_FOUND, OwnRequest, own_answer, own_request
from pipeline.retrieval.chunking import chunk_spans
from pipeline.retrieval.documents import DocumentError
from pipeline.retrieval.fusion import reciprocal_rank_fusion
from pipeline.retrieval.index import Embedding, embed_pending, embed_texts, load_index
from pipeline.retrieval.markers import Passage, cite_passages, parse_markers
from pipeline.retrieval.prompt import passages_block
from pipeline.retrieval.query_vectors import QueryEmbedder, QueryVector
from pipeline.retrieval.search import Retrieved, query_terms, search

__all__ = [
    "NOTHING_FOUND",
    "DocumentError",
    "Embedding",
    "OwnRequest",
    "Passage",
    "QueryEmbedder",
    "QueryVector",
    "Retrieved",
    "chunk_spans",
    "cite_passages",
    "embed_pending",
    "embed_texts",
    "load_index",
    "own_answer",
    "own_request",
    "parse_markers",
    "passages_block",
    "query_terms",
    "reciprocal_rank_fusion",
    "search",
]
