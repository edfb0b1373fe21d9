"""The states a question and a source take, as stored.

Each a :class:`~enum.StrEnum`: a member *is* its string, so it goes into SQL, JSON and log
lines as it is, and a value read from the database compares equal to its member. (The error
classes, the same kind of enum, live with the errors: :class:`pipeline.errors.ErrorClass`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "TERMINAL_STATES",
    "WAITING_STATES",
    "QuestionState",
    "SourceState",
    "Verdict",
]


class QuestionState(StrEnum):
    """Where a question stands (see :mod:`pipeline.store.queue` for the transitions)."""

    PENDING = "pending"  # loaded, never asked
    RUNNING = "running"  # leased to a worker
    RETRY_WAIT = "retry_wait"  # call 1 failed retryably: asked again at next_attempt_at
    AWAITING_STRUCTURE = "awaiting_structure"  # call 1's answer stored; call 2 to come
    DONE = "done"
    INVALID = "invalid"  # call 2's output failed the schema after its repair retry
    UNGROUNDED = "ungrounded"  # answered without groundingMetadata, nudges spent
    BLOCKED = "blocked"  # prompt blocked or answer withheld
    FAILED = "failed"  # dead letter: see error_class


TERMINAL_STATES = frozenset(
    {
        QuestionState.DONE,
        QuestionState.UNGROUNDED,
        QuestionState.BLOCKED,
        QuestionState.FAILED,
        QuestionState.INVALID,
    }
)
WAITING_STATES = (
    QuestionState.PENDING,
    QuestionState.RETRY_WAIT,
    QuestionState.AWAITING_STRUCTURE,
)


class SourceState(StrEnum):
    """Where a source's redirect stands (``sources.resolve_status``; see :mod:`pipeline.links`)."""

    PENDING = "pending"  # a redirect waiting to be resolved
    RESOLVED = "resolved"  # destination read from the redirect's Location
    DIRECT = "direct"  # the URI is its own destination
    EXPIRED = "expired"  # the redirect answered 404/410: too late
    FORBIDDEN = "forbidden"  # the redirect answered 403 (retried once later)
    FAILED = "failed"  # timeouts, 5xx or no Location, after retries
    REJECTED = "rejected"  # the URI or destination is not acceptable (reason kept)
    NO_URI = "no_uri"  # the chunk carried no URI (empty {} chunks)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What is known of a source's redirect: its state, where it leads, and why (when it is
    not usable)."""

    status: str
    destination: str | None = None
    reason: str | None = None
