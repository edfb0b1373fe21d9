"""MkDocs hooks (``hooks:`` in mkdocs.yml). At build time they add to the site the reference
pages generated from the code (:mod:`pipeline.reference`), so no generated page is ever
committed, nor stale; the README as the home page; and ``BENCHMARKS.md``, both kept at the
repository's root, with their links made relative to ``docs/``. A key, a command or a flag with
no description (:func:`pipeline.reference.pages.undocumented`) fails the build."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

from pipeline.reference.pages import render_pages, undocumented

ROOT = Path(__file__).resolve().parent
# Pages whose source lives outside docs/ (the README, the benchmarks, the scheduling examples'
# own README): the file, relative to the root, by its path in the site. Links to them, and to
# docs/ files, are made relative to docs/ (all three pages hold links only from the root).
FROM_ROOT = {
    "index.md": "README.md",
    "benchmarks.md": "BENCHMARKS.md",
    "guides/scheduling.md": "jobs/scheduling/README.md",
}
_SITE_PATH = {source: page for page, source in FROM_ROOT.items()}
# A relative Markdown link's target (not a web address, not an anchor on the same page).
_ROOT_LINK = re.compile(r"\]\((?!https?://|#)([^)\s#]+)(#[^)\s]*)?\)")


def _from_root(text: str, page: str) -> str:
    """``text``'s links, written from the repository's root, as links from ``page``."""
    depth = page.count("/")

    def relink(m: re.Match[str]) -> str:
        target, anchor = m.group(1), m.group(2) or ""
        target = _SITE_PATH.get(target, target.removeprefix("docs/"))
        return f"]({'../' * depth}{target}{anchor})"

    return _ROOT_LINK.sub(relink, text)


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    if missing := undocumented():
        raise PluginError(
            "the reference would show these without a description (a comment above the key,"
            " help= on the command or flag):\n  " + "\n  ".join(missing)
        )
    pages = {
        page: _from_root((ROOT / source).read_text(encoding="utf-8"), page)
        for page, source in FROM_ROOT.items()
    }
    pages.update(render_pages())
    for path, content in pages.items():
        if files.get_file_from_path(path) is not None:
            raise PluginError(f"docs/{path} is generated when the site is built: remove the file")
        files.append(File.generated(config, path, content=content))
    return files
