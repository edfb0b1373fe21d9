"""The review desk, ``ground serve JOB``: a local, server-rendered web app to browse, search and
approve a job's answers.

* ``app``: the aiohttp application and its routes, and serving it;
* ``context``: the job, the engine, the templates every page reads;
* ``overview``: the job overview (states live, routes per class, precision, spend, problems);
* ``views``: the answers list (keyset pages, filters, full-text search), one answer, a review;
* ``security``: the session token, the Content-Security-Policy and the other headers, the
  CSRF token.
"""
