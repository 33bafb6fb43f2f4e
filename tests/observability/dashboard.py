"""The Grafana dashboard of the chart as data: panels, their rows, and runnable PromQL.

Grafana substitutes its variables before a query reaches Prometheus; ``runnable`` does the same
with values that keep every query meaningful against a single scrape target.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.chart.chart_render import CHART_DIR

DASHBOARD_PATH = CHART_DIR / "dashboards" / "memory-mcp.json"
# Grafana's own interval variables, given values that fit a 1s scrape interval.
BUILTIN_VARIABLES = {"__rate_interval": "1m", "__interval": "5s", "__range": "5m"}
MATCH_ANYTHING = ".*"


@dataclass(frozen=True)
class Query:
    ref_id: str
    expr: str  # as written in the dashboard
    legend: str


@dataclass(frozen=True)
class Panel:
    id: int
    title: str
    row: str
    unit: str
    x: int
    y: int
    w: int
    h: int
    queries: tuple[Query, ...]


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD_PATH.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> list[Panel]:
    """Every panel with queries, in layout order, each with the title of the row above it."""
    flat: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        flat.append(panel)
        flat.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    flat.sort(key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    found: list[Panel] = []
    row = ""
    for panel in flat:
        if panel["type"] == "row":
            row = panel["title"]
            continue
        grid = panel["gridPos"]
        queries = tuple(
            Query(target["refId"], target["expr"], target.get("legendFormat", ""))
            for target in panel.get("targets", [])
        )
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        found.append(
            Panel(panel["id"], panel["title"], row, unit, grid["x"], grid["y"], grid["w"], grid["h"], queries)
        )
    return found


def template_variables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    variables: list[dict[str, Any]] = dashboard.get("templating", {}).get("list", [])
    return variables


def runnable(expr: str, dashboard: dict[str, Any], rate_interval: str | None = None) -> str:
    """``expr`` with Grafana's variables replaced: intervals by durations, template variables by ``.*``."""
    values = dict(BUILTIN_VARIABLES)
    if rate_interval is not None:
        values["__rate_interval"] = rate_interval
    values.update(
        {v["name"]: MATCH_ANYTHING for v in template_variables(dashboard) if v["type"] != "datasource"}
    )
    # Longest names first, so that $__range never eats the start of $__rate_interval.
    for name in sorted(values, key=len, reverse=True):
        value = values[name]
        expr = expr.replace(f"${{{name}}}", value).replace(f"[[{name}]]", value)
        expr = re.sub(rf"\${re.escape(name)}\b", value.replace("\\", r"\\"), expr)
    if "$" in expr:
        raise ValueError(f"unknown Grafana variable left in {expr!r}")
    return expr


def label_values_queries(dashboard: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """{variable name: (series, label)} of the ``label_values(series, label)`` template variables."""
    found = {}
    for variable in template_variables(dashboard):
        match = re.fullmatch(
            r"\s*label_values\(\s*([^,]+?)\s*,\s*(\w+)\s*\)\s*", variable.get("definition", "")
        )
        if variable["type"] == "query" and match:
            found[variable["name"]] = (match.group(1), match.group(2))
    return found
