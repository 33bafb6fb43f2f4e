"""A real Prometheus scrapes a real server under real traffic; every dashboard query and every alert
expression of the chart runs against what it stored.

Needs Debian's `prometheus` binary. Outside CI a missing binary skips these tests; in CI (CI set)
it fails them, so that a missing install step cannot hide.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memory_mcp.embedder.client import Embedder
from memory_mcp.store.embedded import EmbeddedPostgres
from tests.conftest import fresh_database
from tests.observability.conftest import SPACE, writer_key
from tests.observability.dashboard import Panel, label_values_queries, load_dashboard, panels, runnable
from tests.observability.prometheus import TARGET_LABELS, LivePrometheus, QueryResult, prometheus_binary
from tests.observability.rules import alerts, rendered_rule_groups, signal
from tests.observability.traffic import TrafficLog, drive
from tests.server.conftest import run_server

ROUNDS = 3
# Panels that stay empty here, and why; every other panel must show the traffic.
NO_DATA_ROWS = {
    "Operator": "no operator runs in this setup",
    "Documents": "the traffic uploads no files",
    "Governance": "the traffic's space is Direct and its key has no rate limit",
}
NO_DATA_PANELS: dict[str, str] = {}
# Alerts whose signal (the value compared with the threshold) a healthy server under traffic produces.
SIGNAL_ALERTS = {
    "MemoryMcpToolLatencyHigh",
    "MemoryMcpDbPoolSaturated",
    "MemoryMcpEmbedderQueueDeep",
    "MemoryMcpEmbeddingBacklog",
}


@dataclass
class LiveRun:
    """Everything the live Prometheus answered, collected at one evaluation time."""

    panels: list[Panel]
    panel_results: dict[tuple[int, str], QueryResult]  # (panel id, refId) -> body
    alert_results: dict[str, QueryResult]
    signal_results: dict[str, QueryResult]
    variable_values: dict[str, list[str]]
    rule_groups: list[dict[str, Any]]
    rendered_groups: list[dict[str, Any]]
    scrapes: int
    traffic: TrafficLog


@pytest.fixture(scope="module")
def prometheus_path() -> str:
    path = prometheus_binary()
    if path is None:
        pytest.fail("prometheus not found: install Debian's prometheus package (scripts/setup-test-env does)")
    return path


@pytest.fixture(scope="module")
async def live(prometheus_path: str, pg: EmbeddedPostgres, embedder: Embedder) -> AsyncIterator[LiveRun]:
    dashboard = load_dashboard()
    groups = rendered_rule_groups()
    app_url, _ = fresh_database(pg)
    with tempfile.TemporaryDirectory(prefix="memory-mcp-prometheus-") as workdir:
        async with (
            run_server(app_url, embedder) as server,
            LivePrometheus(
                prometheus_path, Path(workdir), server.base.removeprefix("http://"), groups
            ) as prom,
        ):
            key = await writer_key(server)
            await prom.wait_for_scrapes(2)  # a baseline before the traffic, so that rates have a start
            traffic = await drive(server.base, key, SPACE, ROUNDS)
            scrapes = await prom.wait_for_scrapes(await prom.successful_scrapes() + 2)
            at = time.time()
            run = LiveRun(
                panels=panels(dashboard),
                panel_results={},
                alert_results={},
                signal_results={},
                variable_values={},
                rule_groups=await prom.rule_groups_state(),
                rendered_groups=groups,
                scrapes=scrapes,
                traffic=traffic,
            )
            for panel in run.panels:
                for query in panel.queries:
                    run.panel_results[panel.id, query.ref_id] = await prom.query(
                        runnable(query.expr, dashboard), at
                    )
            for name, expr in alerts(groups).items():
                run.alert_results[name] = await prom.query(expr, at)
                measured = signal(expr)
                if measured is not None:
                    run.signal_results[name] = await prom.query(measured, at)
            for variable, (series, label) in label_values_queries(dashboard).items():
                run.variable_values[variable] = await prom.label_values(label, series)
    yield run


def errors(results: dict[Any, QueryResult]) -> dict[Any, str]:
    return {
        key: f"{body.get('errorType')}: {body.get('error')}"
        for key, body in results.items()
        if body["status"] != "success"
    }


def finite_values(body: QueryResult) -> list[float]:
    values = [float(series["value"][1]) for series in body["data"]["result"]]
    return [value for value in values if math.isfinite(value)]


def test_prometheus_scraped_the_server(live: LiveRun) -> None:
    assert live.scrapes >= 4
    assert sum(live.traffic.tool_calls.values()) >= 10 * ROUNDS


def test_every_dashboard_query_runs(live: LiveRun) -> None:
    assert len(live.panel_results) >= 20
    assert errors(live.panel_results) == {}


def test_server_and_embedding_panels_show_the_traffic(live: LiveRun) -> None:
    expected = [p for p in live.panels if p.row not in NO_DATA_ROWS and p.title not in NO_DATA_PANELS]
    assert {p.row for p in expected} == {"Server", "Embeddings"}
    empty = [
        p.title
        for p in expected
        if not any(finite_values(live.panel_results[p.id, q.ref_id]) for q in p.queries)
    ]
    assert empty == []


def test_series_carry_the_target_labels(live: LiveRun) -> None:
    pool = next(p for p in live.panels if p.title == "Database pool")
    results = [live.panel_results[pool.id, q.ref_id]["data"]["result"] for q in pool.queries]
    assert all(series["metric"] == {"pod": TARGET_LABELS["pod"]} for result in results for series in result)


def test_namespace_variable_lists_the_scraped_namespace(live: LiveRun) -> None:
    assert live.variable_values == {"namespace": [TARGET_LABELS["namespace"]]}


def test_every_alert_expression_runs(live: LiveRun) -> None:
    assert len(live.alert_results) == 11
    assert errors(live.alert_results) == {}
    assert errors(live.signal_results) == {}


def test_every_alert_compares_a_signal_with_a_threshold(live: LiveRun) -> None:
    assert set(live.signal_results) == set(live.alert_results)


def test_alert_signals_see_the_server(live: LiveRun) -> None:
    silent = [name for name in SIGNAL_ALERTS if not finite_values(live.signal_results[name])]
    assert silent == []
    for name in SIGNAL_ALERTS:
        for series in live.signal_results[name]["data"]["result"]:
            assert series["metric"].get("namespace") == TARGET_LABELS["namespace"], name


def test_prometheus_loads_and_evaluates_the_rules(live: LiveRun) -> None:
    assert sorted(g["name"] for g in live.rule_groups) == sorted(g["name"] for g in live.rendered_groups)
    assert sum(len(g["rules"]) for g in live.rule_groups) == len(live.alert_results)
    unhealthy = {
        rule["name"]: rule.get("lastError")
        for group in live.rule_groups
        for rule in group["rules"]
        if rule["health"] != "ok" or rule.get("lastError")
    }
    assert unhealthy == {}
    assert all(rule["lastEvaluation"] > "2000" for group in live.rule_groups for rule in group["rules"])
