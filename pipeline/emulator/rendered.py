"""``searchEntryPoint.renderedContent``: the Search Suggestions chip HTML.

The real blob is a ``<style>`` block (light and dark variants) followed by a
``<div class="container">`` with a headline (Google logo) and a ``carousel`` of ``chip``
links, one per search query (``docs/wire-format.md`` "groundingMetadata"; the cookbook's
Search_Grounding output). This one keeps that structure and those class names at a smaller
size; the pipeline must store it verbatim, never parse it. Chip links point at
``https://www.google.com/search?q=...`` (real chips use a redirect link; nothing downstream may
follow them).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import quote_plus

_STYLE = """<style>
.container {
  align-items: center;
  border-radius: 8px;
  display: flex;
  font-family: Google Sans, Roboto, sans-serif;
  font-size: 14px;
  line-height: 20px;
  padding: 8px 12px;
}
.chip {
  display: inline-block;
  border: solid 1px;
  border-radius: 16px;
  min-width: 14px;
  padding: 5px 16px;
  text-align: center;
  user-select: none;
  margin: 0 8px;
}
.carousel {
  overflow: auto;
  scrollbar-width: none;
  white-space: nowrap;
  margin-right: -12px;
}
.headline {
  display: flex;
  margin-right: 4px;
}
@media (prefers-color-scheme: light) {
  .container { background-color: #fafafa; box-shadow: 0 0 0 1px #0000000f; }
  .chip { background-color: #ffffff; border-color: #d2d2d2; color: #5e5e5e; text-decoration: none; }
  .logo-dark { display: none; }
}
@media (prefers-color-scheme: dark) {
  .container { background-color: #1f1f1f; box-shadow: 0 0 0 1px #ffffff26; }
  .chip { background-color: #2c2c2c; border-color: #3c4043; color: #fff; text-decoration: none; }
  .logo-light { display: none; }
}
</style>
"""

_HEAD = """<div class="container">
  <div class="headline">
    <svg class="logo-light" width="18" height="18" viewBox="9 9 35 35" fill="none" xmlns="http://www.w3.org/2000/svg"><circle cx="26" cy="26" r="16" fill="#4285F4"/></svg>
    <svg class="logo-dark" width="18" height="18" viewBox="0 0 48 48" xmlns="http://www.w3.org/2000/svg"><circle cx="24" cy="23" fill="#FFF" r="22"/></svg>
    <div class="gradient-container"><div class="gradient"></div></div>
  </div>
  <div class="carousel">
"""  # noqa: E501 - the SVG lines are one element each, as in the real blob

_TAIL = "  </div>\n</div>\n"


@lru_cache(maxsize=1024)
def _cached(queries: tuple[str, ...]) -> str:
    chips = "".join(
        f'    <a class="chip" href="https://www.google.com/search?q={quote_plus(q)}">'
        f"{html.escape(q)}</a>\n"
        for q in queries
        if q
    )
    return _STYLE + _HEAD + chips + _TAIL


def rendered_content(queries: Iterable[str]) -> str:
    """The HTML for these queries (empty queries get no chip)."""
    return _cached(tuple(queries))
