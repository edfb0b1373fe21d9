"""The shipped Prometheus rules (deploy/prometheus/ground-rules.yml): promtool accepts them,
their unit tests pass, and every alert has a firing and a non-firing case there."""

from __future__ import annotations

import yaml

from tests.support.paths import REPO
from tests.support.promtool import run_promtool

RULES_DIR = REPO / "deploy" / "prometheus"
RULES = RULES_DIR / "ground-rules.yml"
RULE_TESTS = RULES_DIR / "ground-rules.test.yml"


def test_promtool_checks_the_rules() -> None:
    done = run_promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = run_promtool("test", "rules", RULE_TESTS.name, cwd=RULES_DIR)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_and_a_non_firing_case() -> None:
    rules = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert {
        "GroundRunFailed",
        "GroundThrottledStorm",
        "GroundQuotaUnderused",
        "GroundSpendOverBudgetPace",
        "GroundResolutionLagging",
        "GroundLinksExpiring",
        "GroundRunStalled",
    } <= alerts
    fired: set[str] = set()
    quiet: set[str] = set()  # a case where some job's series are there and it does not fire
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        jobs = {_job_of(s["series"]) for s in case["input_series"]}
        for check in case.get("alert_rule_test", []):
            firing = {a["exp_labels"]["ground_job"] for a in check["exp_alerts"]}
            if firing:
                fired.add(check["alertname"])
            if jobs - firing:
                quiet.add(check["alertname"])
    assert fired == alerts, f"no firing case: {sorted(alerts - fired)}"
    assert quiet == alerts, f"no non-firing case: {sorted(alerts - quiet)}"


def _job_of(series: str) -> str:
    return series.split('ground_job="', 1)[1].split('"', 1)[0]
