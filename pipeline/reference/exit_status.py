"""The exit statuses, from the contract itself (:mod:`pipeline.exit_codes`)."""

from __future__ import annotations

from pipeline.exit_codes import EPILOG, NEEDS_AN_EDIT, ExitStatus
from pipeline.reference.markdown import GENERATED_NOTE


def page() -> str:
    names = ", ".join(f"`{int(s)}` ({s.name.lower().replace('_', ' ')})" for s in ExitStatus)
    return (
        "\n".join(
            [
                "# Exit status",
                "",
                GENERATED_NOTE.format(source="`pipeline/exit_codes.py`"),
                "",
                f"The statuses `ground` exits with: {names}. `ground --help` ends with this text:",
                "",
                "```text",
                EPILOG,
                "```",
                "",
                "Exit `2`, besides bad usage and a job file that does not validate, is also"
                " what only an edit cures; it is checked before the database is opened, so"
                " no database file is made:",
                "",
                *(f"- {cause}" for cause in NEEDS_AN_EDIT),
                "",
                "An outage, a refusal or a quota exits `1`: a rerun resumes.",
                "",
                "What each means for a scheduler, and what a stop does:"
                " [Operations and alerts](../guides/operations.md#exit-status).",
            ]
        )
        + "\n"
    )
