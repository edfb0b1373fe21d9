"""The states a question takes, as stored.

A :class:`~enum.StrEnum`: a member *is* its string, so it goes into SQL, JSON and log lines as
it is, and a value read from the database compares equal to its member. (The error classes,
the same kind of enum, live with the errors: :class:`pipeline.errors.ErrorClass`.)
"""

from __future__ import annotations

from enum import StrEnum


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
