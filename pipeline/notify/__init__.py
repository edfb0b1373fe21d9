"""``[notify]``: signed webhooks. :mod:`.event` says what each event tells (pure);
:mod:`.webhook` signs and POSTs one attempt; :mod:`.outbox` writes events to the job's
database and delivers them from there, never failing the run."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.notify.event import budget_data, gate_data, is_budget_stop, run_event
    from pipeline.notify.outbox import Outbox, drain_bound_s, notifying
    from pipeline.notify.webhook import attempt, signed_headers, signer_from_env
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "event": ("budget_data", "gate_data", "is_budget_stop", "run_event"),
            "outbox": ("Outbox", "drain_bound_s", "notifying"),
            "webhook": ("attempt", "signed_headers", "signer_from_env"),
        },
    )

__all__ = [
    "Outbox",
    "attempt",
    "budget_data",
    "drain_bound_s",
    "gate_data",
    "is_budget_stop",
    "notifying",
    "run_event",
    "signed_headers",
    "signer_from_env",
]
