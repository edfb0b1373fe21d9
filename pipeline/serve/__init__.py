"""The review desk, ``ground serve JOB``: a local, server-rendered web app to browse, search and
approve a job's answers.

* ``app``: the aiohttp application and its routes, and serving it;
* ``context``: the job, the engine, the templates every page reads;
* ``overview``: the job overview (states live, routes per class, precision, spend, problems);
* ``views``: the answers list (keyset pages, filters, full-text search), one answer, a review;
* ``security``: the session token, the Content-Security-Policy and the other headers, the
  CSRF token.
"""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.serve.app import build_app, serve_desk
    from pipeline.serve.context import DeskContext
    from pipeline.serve.security import MIN_TOKEN_LENGTH, new_token
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "app": ("build_app", "serve_desk"),
            "context": ("DeskContext",),
            "security": ("MIN_TOKEN_LENGTH", "new_token"),
        },
    )

__all__ = ["MIN_TOKEN_LENGTH", "DeskContext", "build_app", "new_token", "serve_desk"]
