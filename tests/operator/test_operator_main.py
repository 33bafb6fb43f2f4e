"""The operator process's own surface: /healthz, /metrics with the reconcile metrics, status rules."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from memory_mcp.operator.outcome import Outcome
from memory_mcp.operator.status import status_update
from tests.operator.support import Cluster, running_operator

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 2, tzinfo=UTC)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def scrape(
    session: aiohttp.ClientSession, port: int
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return samples(await response.text())


async def test_healthz_and_reconcile_metrics(cluster: Cluster, db_urls: tuple[str, str]) -> None:
    port = free_port()
    ready = ("memory_mcp_reconcile_total", (("kind", "Space"), ("outcome", "ready")))
    invalid = ("memory_mcp_reconcile_errors_total", (("kind", "Space"), ("reason", "InvalidSpec")))
    async with (
        running_operator(cluster, db_urls, probe_host="127.0.0.1", probe_port=port),
        aiohttp.ClientSession() as session,
    ):
        async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
            assert (response.status, await response.text()) == (200, "ok\n")
        before = await scrape(session, port)
        await cluster.create("Space", "alpha", {"displayName": "Alpha"})
        await cluster.create("Space", "broken", {"displayName": " "})
        await cluster.ready_because("Space", "alpha", "Reconciled")
        await cluster.ready_because("Space", "broken", "InvalidSpec")
        after = await scrape(session, port)
    assert after[ready] >= before.get(ready, 0) + 1
    assert after[invalid] >= before.get(invalid, 0) + 1
    duration = ("memory_mcp_reconcile_duration_seconds_count", (("kind", "Space"),))
    assert after[duration] >= before.get(duration, 0) + 2


def test_status_writes_only_what_changed_and_keeps_the_transition_time() -> None:
    ok = Outcome(True, "Reconciled", "Space 'a' is in place.", status={"memoryCount": 0})
    first = status_update({}, ok, 1, T0)
    assert first == {
        "memoryCount": 0,
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Reconciled",
                "message": "Space 'a' is in place.",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
    }
    assert status_update(first, ok, 1, T1) == {}
    newer = status_update(first, ok, 2, T1)
    assert newer["observedGeneration"] == 2
    assert newer["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    failed = status_update(first, Outcome(False, "InvalidSpec", "spec.x: bad"), 3, T1)
    assert failed["conditions"][0]["lastTransitionTime"] == "2026-01-02T00:00:00Z"
    assert failed["conditions"][0]["status"] == "False"


def test_other_conditions_are_kept() -> None:
    other = {"type": "Synced", "status": "True", "reason": "X", "message": "m", "lastTransitionTime": "t"}
    update = status_update({"conditions": [other]}, Outcome(True, "Reconciled", "ok"), None, T0)
    assert [c["type"] for c in update["conditions"]] == ["Synced", "Ready"]
    assert "observedGeneration" not in update
