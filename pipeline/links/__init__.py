"""Redirect link -> destination: the pure rules (allow-list, verdicts) and the resolver."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:
    from pipeline.links.domains import from_excluded, normalised
    from pipeline.links.hosts import without_userinfo
    from pipeline.links.resolver import Lookup, Resolver, pending_lookups
    from pipeline.links.rules import AllowList, initial_verdict
else:
    __getattr__ = lazy_surface(
        __name__,
        {
            "domains": ("from_excluded", "normalised"),
            "hosts": ("without_userinfo",),
            "resolver": ("Lookup", "Resolver", "pending_lookups"),
            "rules": ("AllowList", "initial_verdict"),
        },
    )

__all__ = [
    "AllowList",
    "Lookup",
    "Resolver",
    "from_excluded",
    "initial_verdict",
    "normalised",
    "pending_lookups",
    "without_userinfo",
]
