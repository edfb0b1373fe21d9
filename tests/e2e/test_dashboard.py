"""The shipped Grafana dashboard (deploy/grafana/ground.json): every query parses (promtool
checks them as recording rules), and every series it names is in what a run of the demo job
against the emulator exports on /metrics (the exit status: in the textfile written at exit)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from tests.support.demo import DEMO_JOB, demo_overrides
from tests.support.keys import TEST_API_KEY
from tests.support.metrics import free_port, names, read_textfile, scrape
from tests.support.paths import REPO
from tests.support.promtool import run_promtool
from tests.support.waiting import process_exited, wait_until

DASHBOARD = REPO / "deploy" / "grafana" / "ground.json"
GROUND = Path(sys.executable).parent / "ground"
# Grafana's variables, as a query would be sent with every job selected.
VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
    "$ground_job": ".*",
}
SERIES = re.compile(r"\bground_[a-z0-9_]+\b")
LABELS = {"ground_job"}  # the one label named like a series
# Set once the exit status is known: in the textfile written then, never on a live /metrics.
AT_EXIT = {"ground_last_exit_status", "ground_run_finished_timestamp_seconds"}
DEMO_QUESTIONS = 40  # of the demo's questions: a run of a few seconds


def _panels(panels: list[dict]) -> list[dict]:
    flat = []
    for panel in panels:
        flat.append(panel)
        flat.extend(_panels(panel.get("panels", [])))
    return flat


def _queries() -> list[str]:
    """Every PromQL expression of the dashboard, its variables filled in."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in _panels(dashboard["panels"]) for t in p.get("targets", [])]
    assert exprs, "the dashboard has no queries"
    filled = []
    for expr in exprs:
        for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(name, value)
        assert "$" not in expr, f"an unknown variable in {expr!r}"
        filled.append(expr)
    return filled


def _named_series() -> set[str]:
    """The series the dashboard's queries and its job variable name."""
    dashboard = json.loads(DASHBOARD.read_text())
    texts = _queries() + [v.get("definition", "") for v in dashboard["templating"]["list"]]
    return {name for text in texts for name in SERIES.findall(text)} - LABELS


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": expr}
                    for i, expr in enumerate(_queries())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    done = run_promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_series_the_dashboard_names_is_exported_by_a_demo_run(tmp_path: Path) -> None:
    needed = _named_series()
    assert {"ground_calls_total", "ground_grounded_answers", "ground_answers"} <= needed
    port = free_port()
    textfile = tmp_path / "ground.prom"
    with running_emulator(EmulatorConfig(seed=7, latency_p50_ms=100)) as emu:
        overrides = demo_overrides(tmp_path, emu.base_url, DEMO_QUESTIONS)
        run = subprocess.Popen(
            [
                str(GROUND),
                "run",
                str(DEMO_JOB),
                *(arg for override in overrides for arg in ("--set", override)),
                "--progress-interval",
                "0.2",
                "--metrics-port",
                str(port),
                "--metrics-textfile",
                str(textfile),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "GEMINI_API_KEY": TEST_API_KEY},
        )
        live: set[str] = set()

        def scraped_everything() -> bool:
            samples = scrape(port)
            live.update(names(samples or {}))
            return needed - AT_EXIT <= live

        wait_until(
            scraped_everything,
            "a /metrics with every series of the dashboard",
            abort=process_exited(run),
        )
        _, stderr = run.communicate(timeout=120)
    assert run.returncode in (0, 3), stderr.decode()[-2000:]
    final = names(read_textfile(textfile))
    assert needed <= final, f"not in the textfile at exit: {sorted(needed - final)}"
    assert needed - AT_EXIT <= live
