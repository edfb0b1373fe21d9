"""``ground``'s exit statuses: the contract a scheduler (cron, systemd, Kubernetes) relies on.

======  ==============================================================================
``0``   finished, and no question ended in a state the job calls a failure
``1``   stopped early, or the command could not do its work (the message says why):
        retry later. SIGINT, SIGTERM and SIGHUP (a terminal or ssh session closing) during
        a run stop it so: what is under way is stored, the rest given back, one line says
        which signal, and the summary follows
``2``   needs an edit: bad usage, a job file that does not validate, or a mistake only an
        edit of the job file, the question file or the environment cures
        (:data:`NEEDS_AN_EDIT`), refused before the database is opened (no database file
        is made); also a data error found while loading the question file (a malformed,
        ragged or non-UTF-8 line, a NUL, an id twice with different texts, a question over
        ``max_question_chars``, an empty file: named ``file:line``, nothing loaded), and a
        run the API's 404 for its model stopped (the questions not answered stay pending):
        fix it, retrying will not help
``3``   finished, but some questions ended in a state listed in ``[job] fail_on``
        (default ``failed`` and ``invalid``), or more than ``fail_on_sources_lost`` of the
        links were lost (``sources_expired``, ``sources_rejected`` in ``fail_on``): alert,
        but what was stored is good
``130`` interrupted (Ctrl-C) before the run had started: 128 + SIGINT, the shell's
        convention. A Ctrl-C *during* a run stops it cleanly, and the run exits ``1``.
======  ==============================================================================

The README and ``ground --help`` repeat this table; ``EPILOG`` is the text they share.
"""

from __future__ import annotations

import signal
from enum import IntEnum

from pipeline.errors import MODEL_GONE_STOP


class ExitStatus(IntEnum):
    OK = 0
    FAILED = 1  # stopped early, or the command could not do its work
    USAGE = 2  # needs an edit: bad arguments, a job file that does not validate, NEEDS_AN_EDIT
    SOME_FAILED = 3  # finished, but some questions ended in a `fail_on` state
    INTERRUPTED = 130  # Ctrl-C before the run started (128 + SIGINT)


# What exits 2 before a command opens its database (pipeline.cli.preflight), besides bad
# usage and a job file that does not validate: only an edit cures these, never a retry. An
# outage, a refusal or a quota exits 1.
NEEDS_AN_EDIT = (
    "a question file (`[source] file`) that is missing, a directory or unreadable",
    "a CSV header or a first JSONL record without the job's id or text field",
    "no API key for the Developer API (`GEMINI_API_KEY` or `GOOGLE_API_KEY` unset)",
    "no project for Vertex AI (`GOOGLE_CLOUD_PROJECT` unset, no `[model] project`)",
    "a `GOOGLE_APPLICATION_CREDENTIALS` file that cannot be read (Vertex AI)",
    "the variable `[grounding] elasticsearch_api_key_env` names, unset",
    "a model the model table says Google has shut down (`[model] name`, `[structure] model`,"
    " `[verify] model`; `ground models` names its replacement)",
)

# The signals that stop a run early (exit 1): a Ctrl-C, a scheduler's stop, a closing
# terminal or ssh session. ``ground worker`` forwards each to its children.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

EXIT_OK = ExitStatus.OK
EXIT_FAILED = ExitStatus.FAILED
EXIT_USAGE = ExitStatus.USAGE
EXIT_INTERRUPTED = ExitStatus.INTERRUPTED

EPILOG = """\
exit status:
  0    finished; no question ended in a state the job calls a failure
  1    stopped early, or the command could not do its work: retry later;
       also a run stopped by SIGINT, SIGTERM or SIGHUP (a closed terminal)
  2    needs an edit: bad usage, a job file that does not validate, a missing
       question file or id column, no API key (checked before the database
       is opened), a data error in the question file (file:line): fix it first
  3    finished, but some questions ended in a [job] fail_on state
       (default: failed, invalid): alert; the stored data is good
  130  interrupted (Ctrl-C) before the run started\
"""


# `[job] fail_on`'s lost links: the source resolution state each one counts.
_LOST_SOURCES = {"sources_expired": "expired", "sources_rejected": "rejected"}
NOT_A_LINK = frozenset({"no_uri"})  # sources with no link to lose: not in the share


def counts_sources(fail_on: tuple[str, ...]) -> bool:
    """Whether ``fail_on`` names lost links (``sources_expired``, ``sources_rejected``): only
    then does the exit status need the job's sources counted."""
    return any(name in _LOST_SOURCES for name in fail_on)


def failures(
    states: dict[str, int],
    fail_on: tuple[str, ...],
    sources: dict[str, int] | None = None,
    *,
    lost_share: float = 0.05,
) -> dict[str, int]:
    """The job's questions in a ``fail_on`` state, by state (only the non-zero counts), and
    its lost links (``sources_expired``, ``sources_rejected``: their count) when more than
    ``lost_share`` of the sources with a link (``sources``, by resolution status) are so."""
    failed = {state: states[state] for state in fail_on if states.get(state)}
    links = sum(n for status, n in (sources or {}).items() if status not in NOT_A_LINK)
    for name in fail_on:
        lost = (sources or {}).get(_LOST_SOURCES.get(name, ""), 0)
        if lost and lost > lost_share * links:
            failed[name] = lost
    return failed


def run_status(*, stopped: str | None, failed: dict[str, int]) -> ExitStatus:
    """The exit status of a ``ground run``: stopped early beats some failed beats ok."""
    if stopped is not None:
        # The model itself is gone (404): only an edit of [model] name cures it.
        return ExitStatus.USAGE if stopped.startswith(MODEL_GONE_STOP) else ExitStatus.FAILED
    return ExitStatus.SOME_FAILED if failed else ExitStatus.OK


def describe_failures(failed: dict[str, int]) -> str:
    """``failed 3, invalid 1``: the counts that made the status non-zero."""
    return ", ".join(f"{state} {n}" for state, n in failed.items())
