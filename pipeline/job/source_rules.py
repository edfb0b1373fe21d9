"""Where the questions and the own-retrieval documents come from: ``[source]``,
``[retrieval]``, and the own-retrieval fallback of ``[grounding]`` that reads them."""

from __future__ import annotations

from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import RawJob, SourceSection


def check_source(source: SourceSection) -> None:
    if not source.file.strip() and not source.query.strip():
        raise KeyRefused("source", "give either file or query (with url); neither is set")
    check_file_or_query("source", "file", bool(source.file.strip()), source.query, source.url)


def check_file_or_query(
    section: str, file_key: str, file_given: bool, query: str, url: str
) -> None:
    """A section read from a file (``file_key``) or from ``query`` on the database at ``url``
    (a ``url`` without a query was set aside as unused: :mod:`pipeline.job.switched_off`)."""
    if file_given and query.strip():
        raise KeyRefused(section, f"give either {file_key} or query (with url), not both")
    if query and not url:
        raise KeyRefused(f"{section}.url", f"required with {section}.query")
    if query and "://" not in url:
        raise KeyRefused(f"{section}.url", f"{url!r} is not a database URL")


def check_retrieval(job: RawJob) -> None:
    """``[retrieval]``, then the fallback to it when ``[grounding] fallback`` turns it on."""
    r = job.retrieval
    check_file_or_query("retrieval", "docs", bool(r.docs), r.query, r.url)
    if r.chunk_overlap >= r.chunk_chars:
        raise KeyRefused("retrieval.chunk_overlap", "must be less than chunk_chars")
    if r.dense and not r.embedding_model:
        raise KeyRefused("retrieval.embedding_model", "required with dense = true")
    if job.grounding.fallback:
        check_fallback(job)


def check_fallback(job: RawJob) -> None:
    """``fallback = "own_retrieval"``: an index to fall back to, and when (online, or in
    batch mode: own batches and their follow-up, :mod:`pipeline.batch.own`)."""
    g = job.grounding
    if not job.retrieval.configured:
        raise KeyRefused(
            "grounding.fallback",
            "own_retrieval needs a [retrieval] section with docs or query (the documents"
            " `ground index` loads)",
        )
    if (g.fallback_classes or g.fallback_below) and not job.source.class_field:
        key = "fallback_classes" if g.fallback_classes else "fallback_below"
        raise KeyRefused(f"grounding.{key}", "needs source.class_field (the questions' class)")
    if any(not c.strip() for c in g.fallback_classes):
        raise KeyRefused("grounding.fallback_classes", "a class name is empty")
    if len(set(g.fallback_classes)) != len(g.fallback_classes):
        raise KeyRefused("grounding.fallback_classes", "a class is listed twice")
    if not (g.fallback_classes or g.fallback_when or g.fallback_below):
        raise KeyRefused(
            "grounding.fallback",
            'say when: fallback_classes, fallback_when = "ungrounded", or fallback_below',
        )
