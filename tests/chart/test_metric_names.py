"""Dashboards and alerts use only metric names that memory_mcp.core.metrics defines.

The allowed names are read from prometheus_client's registry after importing the module, in the
form Prometheus stores them: counters as `<name>_total`, histograms as `_bucket`/`_sum`/`_count`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

import memory_mcp.core.metrics  # noqa: F401  (registers the collectors)
from tests.chart.chart_render import CHART_DIR, REPO_ROOT, Renderer, one

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "group_left", "group_right"}


def defined_families() -> dict[str, str]:
    """{family name: type} of every memory_mcp_* collector in the default registry."""
    return {
        family.name: family.type for family in REGISTRY.collect() if family.name.startswith("memory_mcp_")
    }


def exported_names() -> set[str]:
    return {name + suffix for name, kind in defined_families().items() for suffix in SUFFIXES[kind]}


def metric_names(expr: str) -> set[str]:
    """Series names a PromQL expression selects (function names, labels and keywords removed)."""
    label_values = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][\w:]*)\s*,\s*\w+\s*\)\s*", expr)
    if label_values:
        return {label_values.group(1)}
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\$\{?\w+\}?", "", text)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = GROUPING.sub("", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        word, is_call = match.group(1), match.group(2)
        if not is_call and word.lower() not in KEYWORDS:
            names.add(word)
    return names


def dashboard_expressions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in {"expr", "definition"} and isinstance(value, str):
                yield value
            else:
                yield from dashboard_expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_expressions(item)


@pytest.fixture(scope="module")
def dashboard_exprs() -> list[str]:
    return list(dashboard_expressions(json.loads((CHART_DIR / "dashboards" / "memory-mcp.json").read_text())))


@pytest.fixture
def alert_exprs(render: Renderer) -> list[str]:
    rule = one(render({"monitoring": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    return [alert["expr"] for group in rule["spec"]["groups"] for alert in group["rules"]]


def test_the_extractor_finds_series_names() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (tool, le) (rate(memory_mcp_tool_duration_seconds_bucket{namespace=~"$ns",'
        ' outcome="error"}[$__rate_interval]))) / on (pod) group_left up > 1e3 and other_metric'
    )
    assert metric_names(expr) == {"memory_mcp_tool_duration_seconds_bucket", "up", "other_metric"}


def test_the_registry_knows_the_module_metrics() -> None:
    names = exported_names()
    assert "memory_mcp_tool_calls_total" in names
    assert "memory_mcp_tool_duration_seconds_bucket" in names
    assert "memory_mcp_db_pool_in_use" in names
    assert "memory_mcp_tool_duration_seconds" not in names


def test_dashboard_uses_only_defined_metrics(dashboard_exprs: list[str]) -> None:
    assert dashboard_exprs
    used = set().union(*(metric_names(expr) for expr in dashboard_exprs))
    assert used - exported_names() == set()


def test_alerts_use_only_defined_metrics(alert_exprs: list[str]) -> None:
    assert alert_exprs
    used = set().union(*(metric_names(expr) for expr in alert_exprs))
    assert used - exported_names() == set()


def test_dashboard_shows_every_defined_metric(dashboard_exprs: list[str]) -> None:
    used = set().union(*(metric_names(expr) for expr in dashboard_exprs))
    shown = {name for name in defined_families() if any(u.startswith(name) for u in used)}
    assert shown == set(defined_families())


def test_operations_guide_lists_every_metric() -> None:
    guide = (REPO_ROOT / "docs" / "operations.md").read_text()
    # Histograms are listed by family name; their series suffixes are explained once.
    listed = {name + ("_total" if kind == "counter" else "") for name, kind in defined_families().items()}
    assert {name for name in listed if f"| `{name}` |" not in guide} == set()
