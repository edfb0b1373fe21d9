"""One job's calls as they happen: the runner (claimer, callers, heartbeat), answering one
question, the call under the limits, the commit writer, and leases."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.online.call import MeteredCaller, ledger_row
    from pipeline.online.leases import default_owner
    from pipeline.online.runner import OnlineRunner
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "call": (
                "MeteredCaller",
                "ledger_row",
            ),
            "leases": ("default_owner",),
            "runner": ("OnlineRunner",),
        },
        (),
    )

__all__ = ["MeteredCaller", "OnlineRunner", "default_owner", "ledger_row"]
