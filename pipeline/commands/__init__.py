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

from typing import TYPE_CHECKING

from pipeline.commands.common import (
    DatabaseUnavailable,
    complain,
    label_local_spend,
    load_job,
    load_questions_into,
    opened,
    say,
)
from pipeline.commands.maintain import (
    estimate_command,
    load_command,
    migrate_command,
    resolve_command,
    retry_command,
)
from pipeline.commands.results import (
    ExportOptions,
    export_command,
    report_command,
    show_command,
    status_command,
)
from pipeline.commands.run import (
    refresh_command,
    restructure_command,
    run_command,
    run_outcome,
)
from pipeline.surface import lazy_surface

if TYPE_CHECKING:
    from pipeline.commands.batch import (
        batch_cancel_command,
        batch_clean_command,
        running_batches,
    )
    from pipeline.commands.cite import cite_command
    from pipeline.commands.index import index_command
    from pipeline.commands.init import init_command
    from pipeline.commands.review import review_import_command
    from pipeline.commands.serve import serve_command
    from pipeline.commands.verify import verify_command
    from pipeline.commands.worker import worker_command
else:  # the commands that are imported only by the command that runs them
    __getattr__ = lazy_surface(
        __name__,
        {
            "batch": ("batch_cancel_command", "batch_clean_command", "running_batches"),
            "cite": ("cite_command",),
            "index": ("index_command",),
            "init": ("init_command",),
            "review": ("review_import_command",),
            "serve": ("serve_command",),
            "verify": ("verify_command",),
            "worker": ("worker_command",),
        },
    )

__all__ = [
    "DatabaseUnavailable",
    "ExportOptions",
    "batch_cancel_command",
    "batch_clean_command",
    "cite_command",
    "complain",
    "estimate_command",
    "export_command",
    "index_command",
    "init_command",
    "label_local_spend",
    "load_command",
    "load_job",
    "load_questions_into",
    "migrate_command",
    "opened",
    "refresh_command",
    "report_command",
    "resolve_command",
    "restructure_command",
    "retry_command",
    "review_import_command",
    "run_command",
    "run_outcome",
    "running_batches",
    "say",
    "serve_command",
    "show_command",
    "status_command",
    "verify_command",
    "worker_command",
]
