"""The chart's PrometheusRule groups, rendered by the real Helm engine, and their alert signals."""

from __future__ import annotations

import re
from typing import Any

from helm_python.chart import Chart

from tests.chart.chart_render import CHART_DIR, NAMESPACE, RELEASE, one, parse_manifests

RULE_VALUES = {"monitoring": {"prometheusRule": {"enabled": True}}}
THRESHOLD = re.compile(r"^(?P<signal>.*?)\s*>\s*(?P<threshold>[0-9.eE+-]+)\s*$", re.DOTALL)


def rendered_rule_groups() -> list[dict[str, Any]]:
    """``spec.groups`` of the PrometheusRule the chart renders with monitoring on."""
    chart = Chart.load(CHART_DIR)
    try:
        manifests = parse_manifests(chart.render(values=RULE_VALUES, name=RELEASE, namespace=NAMESPACE))
    finally:
        chart.close()
    groups: list[dict[str, Any]] = one(manifests, "PrometheusRule")["spec"]["groups"]
    return groups


def alerts(groups: list[dict[str, Any]]) -> dict[str, str]:
    """{alert name: expression}."""
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"] if "alert" in rule}


def signal(expr: str) -> str | None:
    """The measured value of ``<signal> > <threshold>``, or None when the expression has another shape."""
    match = THRESHOLD.match(expr.strip())
    return match.group("signal") if match else None
