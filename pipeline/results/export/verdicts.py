"""The export's verification fields: what ``ground verify`` found of each answer's citations
(:mod:`pipeline.results.precision` says how each figure is counted). Pure."""

from __future__ import annotations

from pipeline.results.export.fields import Field, Kind, Struct
from pipeline.results.export.fields import list_of as _list
from pipeline.results.precision import VERDICTS as PAIR_VERDICTS

# One per checked (citation, cited source) pair.
VERDICT = Struct(
    (
        Field(
            "citation",
            Kind.INT32,
            "the checked citation's position in citations (its support's ordinal)",
            required=True,
        ),
        Field("chunk_index", Kind.INT32, "the cited source's index, where checked by its text"),
        Field("url", Kind.STRING, "the resolved destination read (url_context)"),
        Field(
            "verdict",
            Kind.ENUM,
            "what the page or text says of the claim (unreadable: Google could not read it;"
            " no_verdict: the model gave none)",
            required=True,
            values=PAIR_VERDICTS,
        ),
        Field("quote", Kind.TEXT, "the passage that decides it, as the model quoted it"),
        Field(
            "retrieval_status",
            Kind.ENUM,
            "urlContextMetadata's urlRetrievalStatus, or own_text (checked against its text)",
        ),
        Field(
            "reason",
            Kind.STRING,
            "why the judge's verdict was not taken (no_verdict: a quote that does not decide,"
            " a value that cannot be stored), or the flag on a kept one; null: none",
        ),
        Field("model", Kind.ENUM, "the model that checked it", required=True),
        Field("checked_at", Kind.TIMESTAMP, "when the verdict was stored", required=True),
    )
)
VERIFY_RECORD: tuple[Field, ...] = (
    Field(
        "verified_fraction",
        Kind.FLOAT,
        "ground verify: share of the checked claims with a readable verdict that have a"
        " supported one; null: never checked, or nothing readable",
    ),
    Field(
        "verified",
        Kind.BOOLEAN,
        "ground verify: at least one readable cited pair checked and every one supported"
        " (what --verified keeps); null: never checked",
    ),
    Field(
        "citation_verdicts",
        _list(VERDICT),
        "ground verify: each checked (citation, cited source) pair, by the job's [verify] model",
        required=True,
    ),
)
