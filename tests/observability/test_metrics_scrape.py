"""GET /metrics of a real server after real MCP and REST traffic: the documented series are there.

The prometheus_client registry is per process, so other tests may have counted before this one;
every count is compared as the difference between a scrape before and one after the traffic.
"""

from __future__ import annotations

import re
from collections import Counter

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from tests.observability.conftest import SPACE, writer_key
from tests.observability.traffic import TrafficLog, drive
from tests.server.conftest import TOOLS, RunningServer

# Every route label the server may use: its route templates, the MCP mount, and one bucket for the rest.
ROUTE_TEMPLATE = re.compile(r"^(/mcp|other|/(healthz|readyz|metrics)|/v1(/[a-z]+|/\{[a-z_]+\})*)$")

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(base: str) -> Series:
    """Every sample of GET /metrics, keyed by (sample name, labels)."""
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.get(f"{base}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def total(series: Series, name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(value for (sample, have), value in series.items() if sample == name and wanted <= have)


def delta(before: Series, after: Series, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


def label_values(series: Series, name: str, label: str) -> set[str]:
    return {dict(have)[label] for sample, have in series if sample == name and label in dict(have)}


async def run_traffic(server: RunningServer) -> tuple[Series, Series, TrafficLog]:
    key = await writer_key(server)
    before = await scrape(server.base)
    log = await drive(server.base, key, SPACE, rounds=2)
    after = await scrape(server.base)
    return before, after, log


async def test_tool_calls_are_counted_per_tool_and_outcome(server: RunningServer) -> None:
    before, after, log = await run_traffic(server)
    assert {tool for tool, _ in log.tool_calls} == TOOLS
    counted = Counter(
        {
            (tool, outcome): delta(before, after, "memory_mcp_tool_calls_total", tool=tool, outcome=outcome)
            for tool, outcome in log.tool_calls
        }
    )
    assert counted == log.tool_calls
    assert ("search_memory", "SpaceNotFound") in counted and ("add_memory", "SecretRefused") in counted
    for tool in TOOLS:
        calls = sum(n for (name, _), n in log.tool_calls.items() if name == tool)
        assert delta(before, after, "memory_mcp_tool_duration_seconds_count", tool=tool) == calls
        assert delta(before, after, "memory_mcp_tool_duration_seconds_sum", tool=tool) > 0
        assert delta(before, after, "memory_mcp_tool_duration_seconds_bucket", tool=tool, le="+Inf") == calls
    assert delta(before, after, "memory_mcp_secret_refusals_total") == 2


async def test_http_requests_are_counted_by_route_template(server: RunningServer) -> None:
    before, after, log = await run_traffic(server)
    mcp_posts = delta(before, after, "memory_mcp_http_requests_total", route="/mcp", method="POST")
    # Each tool call is at least one POST; sessions add initialize and notifications.
    assert mcp_posts >= sum(log.tool_calls.values())
    assert delta(before, after, "memory_mcp_http_requests_total", route="/mcp", status="401") == 2
    labels = ("method", "route", "status")
    for call, calls in log.rest_calls.items():
        assert (
            delta(before, after, "memory_mcp_http_requests_total", **dict(zip(labels, call, strict=True)))
            == calls
        )
    per_route = Counter[tuple[str, str]]()
    for (method, route, _), calls in log.rest_calls.items():
        per_route[method, route] += calls
    for (method, route), calls in per_route.items():
        counted = delta(
            before, after, "memory_mcp_http_request_duration_seconds_count", route=route, method=method
        )
        assert counted == calls, route
    document = "/v1/documents/{document_id}"
    assert log.rest_calls["GET", document, "200"] == log.rest_calls["GET", document, "404"] == 2
    assert log.rest_calls["GET", "/v1/whoami", "401"] == 4
    assert delta(before, after, "memory_mcp_http_request_duration_seconds_sum", route="/mcp") > 0


async def test_route_labels_are_templates_not_paths(server: RunningServer) -> None:
    before, after, log = await run_traffic(server)
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        for _ in range(3):
            assert (await http.get(f"/no/such/page/{log.document_ids.pop()}")).status_code == 404
    after = await scrape(server.base)
    routes = label_values(after, "memory_mcp_http_requests_total", "route")
    assert "/v1/documents/{document_id}" in routes and "/mcp" in routes
    assert {route for route in routes if not ROUTE_TEMPLATE.match(route)} == set()
    assert not any(document_id in route for route in routes for document_id in log.document_ids)
    # Three unknown paths with different ids fall into one label, so the label set stays bounded.
    assert delta(before, after, "memory_mcp_http_requests_total", route="other", status="404") == 3
    assert label_values(after, "memory_mcp_http_request_duration_seconds_bucket", "route") == routes


async def test_search_embedding_auth_and_pool_series(server: RunningServer) -> None:
    before, after, log = await run_traffic(server)
    assert log.searches == 4
    assert delta(before, after, "memory_mcp_search_total", mode="semantic") == log.searches
    assert delta(before, after, "memory_mcp_search_total", mode="fulltext") == log.searches
    assert delta(before, after, "memory_mcp_search_total", mode="keyword") == 2
    assert delta(before, after, "memory_mcp_search_fallbacks_total") == 0
    # Saves and searches wait for the in-process model; recall of a repeated query may hit the cache.
    assert delta(before, after, "memory_mcp_embedding_duration_seconds_count", backend="local") >= 2
    assert delta(before, after, "memory_mcp_embedding_failures_total") == 0
    # Each refusal is counted under its reason; the bad keys here are not even of the key format.
    assert delta(before, after, "memory_mcp_auth_failures_total") == (
        log.bad_key_requests + log.missing_key_requests
    )
    assert (
        delta(before, after, "memory_mcp_auth_failures_total", reason="malformed_key") == log.bad_key_requests
    )
    assert delta(before, after, "memory_mcp_auth_failures_total", reason="missing_key") == (
        log.missing_key_requests
    )
    assert total(after, "memory_mcp_db_pool_size") > 0
    assert 0 <= total(after, "memory_mcp_db_pool_in_use") <= total(after, "memory_mcp_db_pool_size")
    for gauge in ("memory_mcp_memories_pending_embedding", "memory_mcp_embedder_queue_depth"):
        assert (gauge, frozenset()) in after, gauge
