"""Redirect link -> destination: the pure rules (allow-list, verdicts) and the resolver."""
