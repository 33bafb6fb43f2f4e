"""A real Prometheus (Debian's `prometheus` binary) on loopback, scraping one target every second.

It runs with a generated config and a throw-away storage folder, answers PromQL over its HTTP
API, and is killed when the context ends. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx2
import yaml

from tests.server.conftest import free_port

JOB = "memory-mcp-server"
# What a ServiceMonitor would attach in a cluster, so that `by (namespace)` / `by (pod)` mean something.
TARGET_LABELS = {"namespace": "memory-mcp", "pod": "memory-mcp-server-0", "service": "memory-mcp-server"}
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0

QueryResult = dict[str, Any]


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


class PrometheusError(RuntimeError):
    pass


class LivePrometheus:
    """``async with LivePrometheus(binary, workdir, "127.0.0.1:8765", rule_groups) as prom: ...``"""

    def __init__(
        self,
        binary: str,
        workdir: Path,
        target: str,
        rule_groups: list[dict[str, Any]] | None = None,
        scrape_interval_s: int = 1,
    ) -> None:
        self.binary = binary
        self.workdir = workdir
        self.target = target
        self.rule_groups = rule_groups or []
        self.scrape_interval_s = scrape_interval_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        self._process: asyncio.subprocess.Process | None = None
        self._http = httpx2.AsyncClient(base_url=self.url, timeout=30)

    def _write_config(self) -> Path:
        interval = f"{self.scrape_interval_s}s"
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": [self.target], "labels": TARGET_LABELS}],
                }
            ],
        }
        if self.rule_groups:
            (self.workdir / "rules.yaml").write_text(
                yaml.safe_dump({"groups": self.rule_groups}, sort_keys=False)
            )
            config["rule_files"] = [str(self.workdir / "rules.yaml")]
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    async def __aenter__(self) -> LivePrometheus:
        config = self._write_config()
        (self.workdir / "data").mkdir()
        with self.log_path.open("wb") as log:
            self._process = await asyncio.create_subprocess_exec(
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
                stdout=log,
                stderr=log,
            )
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.returncode is not None:
                raise PrometheusError(
                    f"prometheus exited with {self._process.returncode}:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx2.TransportError):
                if (await self._http.get("/-/ready")).status_code == 200:
                    return
            await asyncio.sleep(0.2)
        raise PrometheusError(f"prometheus not ready after {START_TIMEOUT_S}s:\n{self.log_tail()}")

    async def stop(self) -> None:
        await self._http.aclose()
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            await process.wait()

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    async def _get(self, path: str, **params: Any) -> QueryResult:
        response = await self._http.get(path, params=params)
        body: QueryResult = response.json()
        return body

    async def query(self, expr: str, at: float | None = None) -> QueryResult:
        """An instant query; the body as Prometheus answers it (``status`` is "success" or "error")."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return await self._get("/api/v1/query", **params)

    async def query_range(self, expr: str, start: float, end: float, step_s: float) -> QueryResult:
        return await self._get(
            "/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step_s:g}"
        )

    async def label_values(self, label: str, match: str) -> list[str]:
        body = await self._get(f"/api/v1/label/{label}/values", **{"match[]": match})
        assert body["status"] == "success", body
        values: list[str] = body["data"]
        return values

    async def rule_groups_state(self) -> list[dict[str, Any]]:
        body = await self._get("/api/v1/rules")
        assert body["status"] == "success", body
        groups: list[dict[str, Any]] = body["data"]["groups"]
        return groups

    async def active_alerts(self) -> list[dict[str, Any]]:
        """Alerts the loaded rules hold as pending or firing."""
        body = await self._get("/api/v1/alerts")
        assert body["status"] == "success", body
        found: list[dict[str, Any]] = body["data"]["alerts"]
        return found

    async def successful_scrapes(self) -> int:
        """How many scrapes of the target succeeded so far (``up`` samples equal to 1)."""
        body = await self.query(f'sum_over_time(up{{job="{JOB}"}}[1h])')
        if body["status"] != "success" or not body["data"]["result"]:
            return 0
        return int(float(body["data"]["result"][0]["value"][1]))

    async def wait_for_scrapes(self, count: int, timeout_s: float = 30.0) -> int:
        """Wait until at least ``count`` scrapes succeeded; returns the number seen."""
        deadline = time.monotonic() + timeout_s
        while (seen := await self.successful_scrapes()) < count:
            if time.monotonic() > deadline:
                raise PrometheusError(f"{seen} of {count} scrapes after {timeout_s}s:\n{self.log_tail()}")
            await asyncio.sleep(self.scrape_interval_s / 2)
        return seen
