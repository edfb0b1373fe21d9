"""What one process can hold: the calls in flight its open-file limit allows, and the redirect
resolver sized to keep up with the answers."""

from __future__ import annotations

import resource

import msgspec

from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import MAX_CONCURRENCY, LimitsSection, ResolverSection

# File descriptors a process keeps besides its calls' and the resolver's connections: the
# database (a pool of up to 20 on PostgreSQL), stdio, logs, the metrics server, the files it
# reads and writes.
RESERVED_FILES = 64  # file descriptors
# Redirects to resolve per answer when sizing the resolver automatically: real answers carry
# up to ~5 web sources (several dozen are possible), so keep well ahead of the answer rate.
RESOLVES_PER_ANSWER = 8


def sized(resolver: ResolverSection, requests_per_minute: int) -> ResolverSection:
    """The resolver's rate and concurrency, with the automatic (0) ones worked out."""
    rate = resolver.requests_per_second or max(20.0, requests_per_minute / 60 * RESOLVES_PER_ANSWER)
    concurrency = resolver.concurrency or int(min(256, max(16, rate / 4)))
    return msgspec.structs.replace(resolver, requests_per_second=rate, concurrency=concurrency)


def concurrency_ceiling(open_files: int, lookups: int) -> int:
    """The most calls in flight one process can hold: a connection each, within its open-file
    limit (``RLIM_INFINITY`` is negative: no limit), beside ``lookups`` resolver connections
    and :data:`RESERVED_FILES`; never above :data:`MAX_CONCURRENCY`."""
    if open_files < 0:
        return MAX_CONCURRENCY
    return min(MAX_CONCURRENCY, open_files - lookups - RESERVED_FILES)


def check_concurrency(limits: LimitsSection, resolver: ResolverSection) -> None:
    """No more calls in flight than this process may open connections for (``resolver``
    sized)."""
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    lookups = resolver.concurrency if resolver.enabled else 0
    ceiling = concurrency_ceiling(open_files, lookups)
    if limits.concurrency > ceiling:
        raise KeyRefused(
            "limits.concurrency",
            f"{limits.concurrency} calls in flight need as many connections, and this process"
            f" may open {open_files} files (ulimit -n), of which the resolver takes {lookups}"
            f" and {RESERVED_FILES} are kept for the database and logs: at most"
            f" {max(ceiling, 0)} here; raise `ulimit -n`, or run more processes"
            " (ground worker --processes N)",
        )
