"""A prompt's tokens, estimated before the call: what a token grant and a worst case reserve
(the real count arrives in ``usageMetadata`` and settles them)."""

from __future__ import annotations

__all__ = [
    "estimate_tokens",
]

CHARS_PER_TOKEN = 4  # Gemini's documented rule of thumb for English text ("about 4 characters")


def estimate_tokens(text: str) -> int:
    """A conservative token count for ``text``, before the call.

    ``ceil(ascii_chars / 4) + non_ascii_chars``: Google documents "about 4 characters per
    token" for English text; a non-ASCII character (accented Latin, CJK, emoji) is counted
    as a whole token, which over-counts most scripts. Never below 1. It is an estimate for
    reservations only: the real count arrives in ``usageMetadata.promptTokenCount`` and
    the token grant is reconciled with it.
    """
    n = len(text)
    if text.isascii():
        return max(1, -(-n // CHARS_PER_TOKEN))
    ascii_chars = len(text.encode("ascii", "ignore"))
    return max(1, -(-ascii_chars // CHARS_PER_TOKEN) + (n - ascii_chars))
