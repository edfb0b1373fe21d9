"""Watching a run: JSON-lines logs that keep every extra field, progress records off a
terminal, /metrics during a run, the node_exporter textfile, and the bar on a real terminal."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

import anyio
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.watch.logs import JsonFormatter, KeyValueFormatter
from pipeline.watch.progress import WatchOptions
from tests.support.jobs import make_job
from tests.support.keys import TEST_API_KEY

GROUND = Path(sys.executable).parent / "ground"
DEADLINE_S = 60.0


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("pipeline.x", logging.WARNING, __file__, 1, "hello %s", ("x",), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_both_formatters_keep_every_extra_field() -> None:
    record = _record(action="stop", reason="budget spent", count=3, spend=Decimal("0.25"))
    entry = orjson.loads(JsonFormatter().format(record))
    assert entry["action"] == "stop" and entry["message"] == "hello x"
    assert entry["reason"] == "budget spent" and entry["count"] == 3
    assert entry["spend"] == "0.25" and entry["level"] == "warning"
    text = KeyValueFormatter().format(_record(action="stop", reason="budget spent", count=3))
    assert "action=stop" in text and "reason='budget spent'" in text and "count=3" in text


def test_off_a_terminal_progress_is_json_records(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=3, latency_p50_ms=40)) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=40, overrides=[])
        (tmp_path / "job.toml").write_text(
            (tmp_path / "job.toml").read_text().replace("concurrency = 8", "concurrency = 2")
        )
        done = subprocess.run(
            [str(GROUND), "run", str(tmp_path / "job.toml"), "--progress-interval", "0.2"],
            capture_output=True,
            text=True,
            env={**os.environ, "GEMINI_API_KEY": TEST_API_KEY},
            timeout=DEADLINE_S,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    records = [orjson.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    progress = [r for r in records if r["action"] == "progress"]
    assert progress, done.stderr
    assert {"finished", "total", "calls", "throttled", "spend_usd", "eta_s"} <= set(progress[0])
    assert progress[-1]["total"] == 40


@pytest.mark.anyio
@pytest.mark.usefixtures("emulator_key")
async def test_metrics_are_served_during_the_run_and_written_as_a_textfile(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    textfile = tmp_path / "ground.prom"
    with running_emulator(
        EmulatorConfig(seed=4, latency_p50_ms=30, fault_429_share=0.1, fault_429_retry_delay_s=0.2)
    ) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=60)
        watch = WatchOptions(
            progress_interval_s=0.2, metrics_port=port, metrics_textfile=str(textfile)
        )
        scraped: list[str] = []

        async def scrape() -> None:
            url = f"http://127.0.0.1:{port}/metrics"
            with anyio.fail_after(DEADLINE_S):
                while True:
                    try:
                        body = await anyio.to_thread.run_sync(
                            lambda: urllib.request.urlopen(url, timeout=5).read().decode()
                        )
                    except OSError:
                        body = ""  # not serving yet
                    if "ground_calls_total{" in body:
                        scraped.append(body)
                        return
                    await anyio.sleep(0.05)

        async with anyio.create_task_group() as group:
            group.start_soon(scrape)
            status = await run_command(spec, watch)
    assert status in (0, 3)  # a 429 may end a question failed after max_attempts
    live = {f.name: f for f in text_string_to_metric_families(scraped[0])}
    assert {"ground_calls", "ground_call_latency_seconds", "ground_adaptive_rate"} <= set(live)

    final = {f.name: f for f in text_string_to_metric_families(textfile.read_text())}
    expected = {
        "ground_questions",
        "ground_queue_depth",
        "ground_calls",
        "ground_call_latency_seconds",
        "ground_throttled",
        "ground_spend_usd",
        "ground_resolution_lag_seconds",
        "ground_adaptive_rate",
    }
    assert expected <= set(final)
    by_state = {s.labels["state"]: s.value for s in final["ground_questions"].samples}
    assert sum(by_state.values()) == 60 and by_state["pending"] == 0
    assert next(iter(final["ground_queue_depth"].samples)).value == 0
    calls = [s for s in final["ground_calls"].samples if s.name == "ground_calls_total"]
    assert sum(s.value for s in calls) >= 60
    assert all(s.labels["ground_job"] == "test" for s in calls)
    throttled = next(s for s in final["ground_throttled"].samples if s.name.endswith("_total"))
    assert throttled.value > 0
    assert sum(s.value for s in calls if s.labels["outcome"] != "ok") >= throttled.value
    lag = next(
        s for s in final["ground_resolution_lag_seconds"].samples if s.name.endswith("_count")
    )
    assert lag.value > 0
    assert not list(tmp_path.glob("ground.prom.*"))  # the temporary file was renamed away


# CI installs tmux (.ci/run), so there the test always runs.
@pytest.mark.skipif(
    shutil.which("tmux") is None and not os.environ.get("CI"),
    reason="tmux is not installed (.ci/run installs it)",
)
def test_a_terminal_gets_the_progress_bar_and_the_summary(tmp_path: Path) -> None:
    session = f"ground-test-{os.getpid()}"
    with running_emulator(EmulatorConfig(seed=5, latency_p50_ms=20)) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=30)
        command = (
            f"cd {tmp_path} && GEMINI_API_KEY={TEST_API_KEY} {GROUND} run job.toml;"
            " echo GROUND-EXIT=$?; sleep 600"
        )
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "40", command],
            check=True,
        )
        try:
            screen = ""
            deadline = time.monotonic() + DEADLINE_S
            while "GROUND-EXIT=" not in screen:
                assert time.monotonic() < deadline, f"no summary on the terminal:\n{screen}"
                time.sleep(0.1)
                screen = subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", session],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    assert "GROUND-EXIT=0" in screen
    bar = next(line for line in screen.splitlines() if line.startswith("grounding"))
    assert "30/30" in bar and "q/s" in bar and "429s 0" in bar and "$" in bar
    assert "run: 30 questions finished in " in screen and "; 30 calls" in screen
    assert "job test: 30 questions, 30 finished" in screen


def test_log_format_is_accepted_before_and_after_the_command() -> None:
    from pipeline.cli.parser import build_parser

    parser = build_parser()
    assert parser.parse_args(["--log-format", "json", "run", "j.toml"]).log_format == "json"
    assert parser.parse_args(["run", "j.toml", "--log-format", "text"]).log_format == "text"
    assert parser.parse_args(["run", "j.toml"]).log_format is None  # decided by the terminal
