"""The offset rule for raw (dict) bodies, shared by emulator tests.

A segment with ``partIndex`` counts bytes within that part; without one, over the candidate's
non-thought text parts joined (Gemini 3 tool parts and code execution come first;
``docs/wire-format.md`` "Supports and byte offsets").
"""

from __future__ import annotations

from typing import Any


def offset_bytes(parts: list[dict[str, Any]], segment: dict[str, Any]) -> bytes:
    """The UTF-8 bytes a raw segment's ``startIndex``/``endIndex`` run over."""
    if "partIndex" in segment:
        return parts[segment["partIndex"]]["text"].encode()
    return "".join(p["text"] for p in parts if "text" in p and not p.get("thought")).encode()
