"""``[notify]``: a signed webhook when a run ends. :mod:`.event` says which event and its body
(pure); :mod:`.webhook` signs and sends it, never failing the run."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.notify.event import event_body, event_data, event_name
    from pipeline.notify.webhook import Delivery, deliver, send_outcome, signed_headers
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "event": ("event_body", "event_data", "event_name"),
            "webhook": ("Delivery", "deliver", "send_outcome", "signed_headers"),
        },
    )

__all__ = [
    "Delivery",
    "deliver",
    "event_body",
    "event_data",
    "event_name",
    "send_outcome",
    "signed_headers",
]
