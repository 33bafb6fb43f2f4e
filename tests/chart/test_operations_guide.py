"""docs/operations.md keeps up with the chart: every value and every alert is documented."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tests.chart.chart_render import CHART_DIR, REPO_ROOT, Renderer, one

GUIDE = (REPO_ROOT / "docs" / "operations.md").read_text()


def value_keys(schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Dotted keys of values.yaml, stopping at free-form maps (resources, labels, ...)."""
    properties = schema.get("properties")
    if schema.get("type") == "object" and properties and not path.endswith("resources"):
        for name, child in properties.items():
            yield from value_keys(child, f"{path}.{name}" if path else name)
    else:
        yield path


def anchor(heading: str) -> str:
    """The fragment a Markdown renderer gives a heading."""
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")


def test_every_value_is_in_the_configuration_table() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    keys = set(value_keys(schema))
    assert "server.resources" in keys and "embedder.serve.maxBatchSize" in keys
    assert {key for key in keys if f"| `{key}` |" not in GUIDE} == set()


def test_every_alert_has_a_runbook_entry(render: Renderer) -> None:
    rule = one(render({"monitoring": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    anchors = {anchor(line[4:].strip()) for line in GUIDE.splitlines() if line.startswith("### ")}
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            runbook = alert["annotations"]["runbook"]
            assert runbook == f"docs/operations.md#{anchor(alert['alert'])}"
            assert runbook.split("#")[1] in anchors, alert["alert"]


def test_guide_keeps_a_dashboard_section() -> None:
    assert "\n## Dashboard\n" in GUIDE
