"""Fixtures that render charts/memory-mcp with the real Helm engine (helm-python-sdk), offline.

Tests work on the manifests of the scenarios in chart_render.SCENARIOS; a render is cached for
the session because the chart does not change while the tests run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from helm_python.chart import Chart

from tests.chart.chart_render import (
    CHART_DIR,
    NAMESPACE,
    RELEASE,
    SCENARIOS,
    Manifest,
    Renderer,
    parse_manifests,
)


@pytest.fixture(scope="session")
def chart() -> Iterator[Chart]:
    loaded = Chart.load(CHART_DIR)
    yield loaded
    loaded.close()


@pytest.fixture(scope="session")
def render(chart: Chart) -> Renderer:
    """Render the chart with the given values (cached per distinct values)."""
    cache: dict[str, list[Manifest]] = {}

    def _render(values: dict[str, Any]) -> list[Manifest]:
        key = json.dumps(values, sort_keys=True)
        if key not in cache:
            cache[key] = parse_manifests(chart.render(values=values, name=RELEASE, namespace=NAMESPACE))
        return cache[key]

    return _render


@pytest.fixture(params=list(SCENARIOS))
def scenario(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def scenario_values(scenario: str) -> dict[str, Any]:
    return SCENARIOS[scenario]


@pytest.fixture
def scenario_manifests(render: Renderer, scenario_values: dict[str, Any]) -> list[Manifest]:
    return render(scenario_values)


@pytest.fixture
def everything(render: Renderer) -> list[Manifest]:
    return render(SCENARIOS["everything"])


@pytest.fixture
def defaults(render: Renderer) -> list[Manifest]:
    return render(SCENARIOS["defaults"])
