"""What each ``ground`` command does: one async function per command, returning an exit status.

The CLI only parses arguments and calls these. They print human-readable results to stdout and
problems to stderr; they never print a credential. By module:

* ``run``: ``run`` and the commands that are runs (``refresh``, ``restructure``);
* ``maintain``: ``migrate``, ``load``, ``resolve``, ``retry``, ``estimate``;
* ``index``: ``index`` (the job's own retrieval index; imported only by that command);
* ``fallback``: own retrieval's side of ``run`` (the index it needs, ``--fallback-auto``);
* ``results``: ``status``, ``export``, ``show``, ``report``;
* ``serve``: ``serve``, the review desk (imported only by that command);
* ``review``: ``review import``, decisions made elsewhere;
* ``batch``: batch mode's side of ``run`` and of ``status``, ``batch cancel`` and
  ``batch clean`` (imported only by the commands that meet a batch job);
* ``common``: messages, the job's database opened and migrated, loading the questions.
"""
