"""One job's calls as they happen: the runner (claimer, callers, heartbeat), answering one
question, the call under the limits, the commit writer, and leases."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.online.call import MeteredCaller
    from pipeline.online.leases import default_owner
    from pipeline.online.runner import OnlineRunner
    from pipeline.online.verification import Checker, CheckResult
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "call": ("MeteredCaller",),
            "leases": ("default_owner",),
            "runner": ("OnlineRunner",),
            "verification": (
                "CheckResult",
                "Checker",
            ),
        },
        (),
    )

__all__ = [
    "CheckResult",
    "Checker",
    "MeteredCaller",
    "OnlineRunner",
    "default_owner",
]
