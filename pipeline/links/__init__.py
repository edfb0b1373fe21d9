"""Redirect link -> destination: the pure rules (allow-list, verdicts) and the resolver."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.links.resolver import Lookup, Resolver, pending_lookups
    from pipeline.links.rules import AllowList, initial_verdict
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "resolver": (
                "Lookup",
                "Resolver",
                "pending_lookups",
            ),
            "rules": (
                "AllowList",
                "initial_verdict",
            ),
        },
        (),
    )

__all__ = ["AllowList", "Lookup", "Resolver", "initial_verdict", "pending_lookups"]
