"""The PrometheusRule groups pass `promtool check rules` and fire as intended (`promtool test rules`);
the dashboard's queries are valid PromQL.

promtool comes from Debian's `prometheus` package. Outside CI a missing promtool skips these
tests; in CI (CI=true) it fails them, so that a missing install step cannot hide.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.chart.chart_render import CHART_DIR, Renderer, one

ALERT_TESTS = Path(__file__).with_name("alerts.test.yaml")
# What Grafana substitutes before sending a query, with values that keep the query meaningful.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$namespace": ".*"}


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's prometheus package (scripts/setup-test-env does)")
    return path


@pytest.fixture
def rules_dir(render: Renderer, tmp_path: Path) -> Path:
    """A folder holding the rendered rule groups as rules.yaml, next to the promtool unit tests."""
    rule = one(render({"monitoring": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    return tmp_path


def run_promtool(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_checks_the_rules(promtool: str, rules_dir: Path) -> None:
    result = run_promtool(promtool, "check", "rules", "rules.yaml", cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 11 rules found" in result.stdout


def test_alerts_fire_on_synthetic_series(promtool: str, rules_dir: Path) -> None:
    result = run_promtool(promtool, "test", "rules", ALERT_TESTS.name, cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test(render: Renderer) -> None:
    rule = one(render({"monitoring": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    declared = {alert["alert"] for group in rule["spec"]["groups"] for alert in group["rules"]}
    tested = {
        case["alertname"]
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case["exp_alerts"]
    }
    assert declared == tested


def test_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    dashboard = json.loads((CHART_DIR / "dashboards" / "memory-mcp.json").read_text())
    rules = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, target["expr"]
            rules.append({"record": f"dashboard:panel{panel['id']}:{target['refId'].lower()}", "expr": expr})
    assert len(rules) >= 20
    (tmp_path / "dashboard.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    result = run_promtool(promtool, "check", "rules", "dashboard.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
