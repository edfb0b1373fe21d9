"""The credentials the tests hand to ``ground``: one name each, so that the artifact scan
(``tests/conftest.py``) knows what must never be written."""

from __future__ import annotations

from pipeline.emulator.config import DEFAULT_API_KEY, DEFAULT_BEARER_TOKEN
from pipeline.emulator.oauth import TOKEN_PREFIX

# The API key every test that runs a Developer API job puts in GEMINI_API_KEY: the emulator's
# own (``emu.api_key`` is the same value).
TEST_API_KEY = DEFAULT_API_KEY
# The static Vertex token the emulator accepts, and how each token its /token issues starts.
TEST_BEARER_TOKEN = DEFAULT_BEARER_TOKEN
ISSUED_TOKEN_PREFIX = TOKEN_PREFIX
