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
