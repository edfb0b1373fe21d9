"""One job's calls as they happen: the runner (claimer, callers, heartbeat), answering one
question, the call under the limits, the commit writer, and leases."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:
    from pipeline.online.leases import default_owner
    from pipeline.online.runner import OnlineRunner
    from pipeline.online.writer import store_outcomes, unstored
else:
    __getattr__ = lazy_surface(
        __name__,
        {
            "leases": ("default_owner",),
            "runner": ("OnlineRunner",),
            "writer": ("store_outcomes", "unstored"),
        },
    )

__all__ = ["OnlineRunner", "default_owner", "store_outcomes", "unstored"]
