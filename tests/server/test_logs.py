"""Structured logs: one JSON object a line, with the request id the response also carries."""

from __future__ import annotations

import json
import logging

import httpx2
import pytest

from memory_mcp.core.logs import JsonFormatter
from tests.server.conftest import RunningServer


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def access_lines():
    capture = Capture()
    logger = logging.getLogger("memory_mcp.access")
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    yield capture.lines
    logger.removeHandler(capture)


async def test_access_log_is_json_with_the_request_id(server: RunningServer, access_lines: list[str]) -> None:
    async with httpx2.AsyncClient(base_url=server.base) as http:
        given = await http.get("/healthz", headers={"X-Request-Id": "req-given-42"})
        generated = await http.get("/v1/whoami")
        nested = await http.post("/v1/memories/m-1/accept")  # a route of a router inside `/v1`
    assert given.headers["x-request-id"] == "req-given-42"
    assert len(generated.headers["x-request-id"]) == 32
    entries = [json.loads(line) for line in access_lines]
    by_id = {e["request_id"]: e for e in entries}
    assert by_id["req-given-42"]["route"] == "/healthz" and by_id["req-given-42"]["status"] == 200
    unauthorized = by_id[generated.headers["x-request-id"]]
    assert unauthorized["route"] == "/v1/whoami" and unauthorized["status"] == 401
    assert by_id[nested.headers["x-request-id"]]["route"] == "/v1/memories/{memory_id}/accept"
    assert unauthorized["level"] == "info" and unauthorized["duration_ms"] >= 0
