"""``ground emulator``: serve the emulator until SIGTERM/SIGINT.

Configuration precedence: defaults < ``--config FILE`` (TOML, see ``jobs/emulator.toml``) <
the explicit flags below < ``--set KEY=VALUE`` (any :class:`EmulatorConfig` field).
Once the socket is bound, exactly one line goes to stdout (flushed), so a script can read
the port when it passed ``--port 0``::

    emulator listening on http://127.0.0.1:43117
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any

from aiohttp import web

from pipeline.emulator.config import (
    ALL_MODELS,
    ConfigError,
    EmulatorConfig,
    ModelQuota,
    config_from_mapping,
    load_config,
)
from pipeline.emulator.server import build_app

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8089
SHUTDOWN_GRACE_S = 1.0  # seconds in-flight requests get after a stop signal

# flag -> config field, for the plain value flags
_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--seed", "seed", int, "seed of every random choice (default 0)"),
    ("--latency-ms", "latency_p50_ms", float, "median added latency, ms (0 = none)"),
    ("--latency-p99-ms", "latency_p99_ms", float, "99th percentile latency, ms"),
    ("--ungrounded-share", "ungrounded_share", float, "share of answers without grounding"),
    ("--redirect-ttl-s", "redirect_ttl_s", float, "seconds a redirect link lives"),
    ("--redirect-forbidden-share", "redirect_forbidden_share", float, "share of 403 links"),
    ("--quota-window-s", "quota_window_s", float, "rpm/tpm sliding window, seconds"),
    ("--grounding-window-s", "grounding_window_s", float, "grounded_rpd window, seconds"),
    ("--fault-429-share", "fault_429_share", float, "share of 429s with RetryInfo"),
    ("--fault-500-share", "fault_500_share", float, "share of 500 INTERNAL"),
    ("--fault-503-share", "fault_503_share", float, "share of 503 UNAVAILABLE"),
    ("--fault-504-share", "fault_504_share", float, "share of 504 DEADLINE_EXCEEDED"),
    ("--fault-502-html-share", "fault_502_html_share", float, "share of HTML 502 pages"),
    ("--fault-truncate-share", "fault_truncate_share", float, "share of cut JSON bodies"),
    ("--fault-hang-share", "fault_hang_share", float, "share of requests that hang"),
    ("--negative-usage-share", "negative_usage_share", float, "share of negative usage"),
    ("--unsupported-share", "unsupported_share", float, "verification: unsupported pairs"),
    ("--unreadable-share", "unreadable_share", float, "verification: unreadable pages"),
    ("--hostile-judge-share", "hostile_judge_share", float, "verification: hostile answers"),
    ("--token-hang-s", "token_hang_s", float, "seconds POST /token hangs before answering"),
    ("--storm-503-requests", "storm_503_requests", int, "first N requests answer 503"),
    ("--storm-503-s", "storm_503_s", float, "503 for every request this long after start"),
    ("--bare-429-requests", "bare_429_requests", int, "first N grounded requests: bare 429"),
    ("--retry-after-s", "retry_after_s", float, "Retry-After on every 429, s (0 = none)"),
    ("--retry-after-form", "retry_after_form", str, "Retry-After as 'seconds' or 'date'"),
    (
        "--billed-query-fanout",
        "billed_query_fanout",
        int,
        "grounded searches bill K queries, listing one or none (0 = bill what is listed)",
    ),
)


def port_number(text: str) -> int:
    """A TCP port, 0..65535 (0 = any free one): checked here, not by bind()'s OverflowError."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0..65535)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the emulator's flags to ``parser`` (a subcommand parser or a fresh one)."""
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"bind address ({DEFAULT_HOST})")
    parser.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"port, 0 = any free ({DEFAULT_PORT})",
    )
    parser.add_argument("--config", metavar="FILE", help="TOML file of EmulatorConfig fields")
    for flag, field, typ, text in _FLAGS:
        parser.add_argument(flag, dest=f"emu_{field}", type=typ, default=None, help=text)
    parser.add_argument(
        "--api-key",
        dest="emu_api_keys",
        action="append",
        default=None,
        metavar="KEY",
        help="accepted API key (repeatable; replaces the default emulator-key)",
    )
    for flag, name in (("--rpm", "rpm"), ("--tpm", "tpm"), ("--grounded-rpd", "grounded_rpd")):
        parser.add_argument(
            flag,
            dest=f"quota_{name}",
            type=int,
            default=None,
            help=f"{name} for every model without its own quota table (0 = unlimited)",
        )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any EmulatorConfig field, e.g. --set thought_share=0.5 (repeatable)",
    )


def config_from_args(args: argparse.Namespace) -> EmulatorConfig:
    """The config the flags describe (raises ConfigError naming the bad key)."""
    cfg = load_config(args.config) if args.config else EmulatorConfig()
    explicit: dict[str, Any] = {}
    for _flag, field, _typ, _text in _FLAGS:
        v = getattr(args, f"emu_{field}")
        if v is not None:
            explicit[field] = v
    if args.emu_api_keys:
        explicit["api_keys"] = args.emu_api_keys
    cfg = config_from_mapping(explicit, source="command line", base=cfg)
    quota = {n: getattr(args, f"quota_{n}") for n in ("rpm", "tpm", "grounded_rpd")}
    if any(v is not None for v in quota.values()):
        base = cfg.quotas.get(ALL_MODELS, ModelQuota())
        merged = {n: (v if v is not None else getattr(base, n)) for n, v in quota.items()}
        cfg = cfg.replace(quotas={**cfg.quotas, ALL_MODELS: ModelQuota(**merged)})
    sets: dict[str, Any] = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        sets[key.strip()] = value.strip()
    return config_from_mapping(sets, source="--set", base=cfg) if sets else cfg


async def serve(config: EmulatorConfig, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT; print the listening line once bound."""
    runner = web.AppRunner(
        build_app(config),
        handler_cancellation=True,
        shutdown_timeout=SHUTDOWN_GRACE_S,
        access_log=None,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        shown = f"[{host}]" if ":" in host else host
        print(f"emulator listening on http://{shown}:{bound}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):  # not on Windows
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    """Entry point for ``ground emulator``; returns the exit status."""
    try:
        config = config_from_args(args)
    except (ConfigError, ValueError) as exc:
        print(f"ground emulator: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config, args.host, args.port))
    except OSError as exc:  # e.g. the port is taken
        print(f"ground emulator: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0
