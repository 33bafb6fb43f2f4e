"""The API-server tier: the real operator process against a real kube-apiserver, with the chart's RBAC.

One control plane (etcd, kube-apiserver, kube-controller-manager's garbage collector) and one
operator process serve the whole session; tests use object names of their own. The binaries come
from ``scripts/kube-apiserver``; without them every test here fails (it does not skip), saying so.

Run only this tier: ``python -m pytest -m apiserver tests/apiserver``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from memory_mcp.store.db import Database
from memory_mcp.store.embedded import EmbeddedPostgres
from tests.apiserver.controlplane import (
    ControlPlane,
    ControlPlaneMissing,
    Identity,
    find_binaries,
    free_port,
    running_control_plane,
    service_account_identity,
)
from tests.apiserver.kube import Kube, wait_for
from tests.apiserver.support import LATENCIES, LOGS, SECRET_NAMESPACE, OperatorProcess
from tests.chart.chart_render import CHART_DIR, NAMESPACE, RELEASE, REPO_ROOT, parse_manifests
from tests.conftest import fresh_database

CRD_DIR = REPO_ROOT / "crds"
# Short, so that the tests also see periodic resyncs against the real API server.
RESYNC_SECONDS = 5


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not (LATENCIES or LOGS):
        return
    terminalreporter.section("API-server tier")
    for what, values in LATENCIES.items():
        shown = ", ".join(f"{v:.3f}" for v in values)
        terminalreporter.write_line(f"{what}: {shown} s")
    for log in LOGS:
        terminalreporter.write_line(f"log: {log}")


def operator_rbac() -> list[dict[str, Any]]:
    """The operator's ServiceAccount, ClusterRole and ClusterRoleBinding, rendered by Helm."""
    from helm_python.chart import Chart

    chart = Chart.load(CHART_DIR)
    try:
        rendered = chart.render(values={}, name=RELEASE, namespace=NAMESPACE)
    finally:
        chart.close()
    manifests = parse_manifests(
        {p: t for p, t in rendered.items() if p.endswith("templates/operator-rbac.yaml")}
    )
    kinds = sorted(m["kind"] for m in manifests)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ServiceAccount"], kinds
    return manifests


@pytest.fixture(scope="session")
def rbac() -> list[dict[str, Any]]:
    return operator_rbac()


@pytest.fixture(scope="session")
def operator_identity(rbac: list[dict[str, Any]]) -> Identity:
    """A static token the API server takes for the chart's operator ServiceAccount."""
    account = next(m for m in rbac if m["kind"] == "ServiceAccount")["metadata"]
    return service_account_identity(account["namespace"], account["name"])


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, operator_identity: Identity
) -> Iterator[ControlPlane]:
    missing = ""
    try:
        binaries = find_binaries()
    except ControlPlaneMissing as exc:
        missing = str(exc)
    if missing:
        pytest.fail(missing, pytrace=False)
    root = tmp_path_factory.mktemp("kube")
    LOGS.append(root)
    with running_control_plane(root, binaries, [operator_identity]) as plane:
        yield plane


@pytest.fixture(scope="session")
async def kube(control_plane: ControlPlane) -> AsyncIterator[Kube]:
    """The admin (system:masters)."""
    client = Kube(control_plane.url, control_plane.admin.token, control_plane.ssl)
    yield client
    await client.close()


@pytest.fixture(scope="session")
async def operator_kube(control_plane: ControlPlane, operator_identity: Identity) -> AsyncIterator[Kube]:
    """The operator's identity, limited by the chart's ClusterRole."""
    client = Kube(control_plane.url, operator_identity.token, control_plane.ssl)
    yield client
    await client.close()


async def install_crds(kube: Kube) -> list[dict[str, Any]]:
    crds = [yaml.safe_load(path.read_text()) for path in sorted(CRD_DIR.glob("*.yaml"))]
    for crd in crds:
        await kube.create(crd)

    async def established() -> bool:
        for crd in crds:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
            found = await kube.get_path(path)
            conditions = {
                c["type"]: c["status"] for c in ((found or {}).get("status") or {}).get("conditions") or []
            }
            if conditions.get("Established") != "True":
                return False
        return True

    await wait_for(established, within=30, what="the CRDs to be established")
    # Discovery of the new group can lag a moment behind Established.
    await wait_for(
        lambda: kube.get_path("/apis/memory-mcp.io/v1alpha1"), within=30, what="discovery of memory-mcp.io"
    )
    return crds


@pytest.fixture(scope="session")
async def installed(kube: Kube, rbac: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CRDs, the operator's namespace and RBAC (from the chart), the namespaces Secrets go to."""
    crds = await install_crds(kube)
    for namespace in (NAMESPACE, SECRET_NAMESPACE):
        await kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for manifest in rbac:
        await kube.create(manifest)
    return crds


def operator_command() -> list[str]:
    script = Path(sys.executable).parent / "memory-mcp"
    return [str(script)] if script.exists() else [sys.executable, "-m", "memory_mcp.cli"]


@pytest.fixture(scope="session")
def operator_db_urls(pg: EmbeddedPostgres) -> tuple[str, str]:
    return fresh_database(pg)


@pytest.fixture(scope="session")
async def operator_db(operator_db_urls: tuple[str, str]) -> AsyncIterator[Database]:
    """The operator's database, for the tests' assertions (its own pool)."""
    database = Database(operator_db_urls[0], pool_size=2)
    yield database
    await database.close()


@pytest.fixture(scope="session")
async def operator(
    control_plane: ControlPlane,
    installed: list[dict[str, Any]],
    operator_identity: Identity,
    operator_db_urls: tuple[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[OperatorProcess]:
    folder = tmp_path_factory.mktemp("operator")
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(control_plane.write_kubeconfig(folder / "kubeconfig", operator_identity)),
        "MEMORY_MCP_DATABASE_URL": operator_db_urls[1],
        "MEMORY_MCP_LOG_FORMAT": "text",
    }
    for variable in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(variable, None)
    log = folder / "operator.log"
    LOGS.append(log)
    argv = [
        *operator_command(),
        *("operator", "--host", "127.0.0.1", "--port", str(port)),
        *("--resync-seconds", str(RESYNC_SECONDS)),
    ]
    with log.open("w") as output:
        process = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    running = OperatorProcess(process, log, port)
    try:
        async with aiohttp.ClientSession() as http:

            async def healthy() -> bool:
                assert running.alive(), f"the operator exited:\n{running.output()}"
                try:
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            try:
                await wait_for(healthy, within=60, what="the operator's /healthz", interval=0.1)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{running.output()}") from None
        yield running
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
