"""The operator rides out an API-server restart: kube-apiserver stops and starts on the same etcd."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import aiohttp
import pytest

from memory_mcp.store import spaces
from memory_mcp.store.db import Database
from tests.apiserver.controlplane import ControlPlane
from tests.apiserver.kube import Kube, wait_for
from tests.apiserver.support import (
    SECRET_NAMESPACE,
    OperatorProcess,
    declare,
    grants_are,
    ready_true,
    record_latency,
)

pytestmark = pytest.mark.apiserver

# kopf's log line when one of its watches is refused.
WATCH_REFUSED = re.compile(r"Watcher for \S+ has failed: .*forbidden")

# Long enough for the operator's watches to fail and retry at least once.
DOWN_SECONDS = 5.0


@pytest.mark.parametrize("restart", [1, 2])
async def test_the_operator_recovers_from_an_api_server_restart(
    operator: OperatorProcess, kube: Kube, operator_db: Database, control_plane: ControlPlane, restart: int
) -> None:
    before = await declare(kube, f"restart{restart}")

    await asyncio.to_thread(control_plane.stop_apiserver)
    await asyncio.sleep(DOWN_SECONDS)
    assert operator.alive(), f"the operator exited while the API server was down:\n{operator.output()}"
    await asyncio.to_thread(control_plane.start_apiserver)

    # A new object after the restart is handled...
    space = f"after-restart{restart}"
    started = time.monotonic()
    await kube.create_object("Space", space, {"displayName": "After the restart"})
    await wait_for(lambda: ready_true(kube, "Space", space), what="Ready on the new Space", within=90)
    record_latency("new Space Ready after API-server restart", time.monotonic() - started)
    assert await spaces.get_space(operator_db, space) is not None

    # ...and so is a change to one declared before it; the key itself is unchanged.
    wanted = {before.space: "ReadWrite", space: "Read"}
    await kube.update_spec(
        "ApiKey", before.apikey, {"grants": [{"space": s, "access": a} for s, a in wanted.items()]}
    )
    await wait_for(
        lambda: grants_are(operator_db, before.key, wanted), what="grants after the restart", within=60
    )
    assert await kube.secret_key(SECRET_NAMESPACE, before.secret) == before.key
    assert operator.alive(), operator.output()
    if control_plane.controller_manager is not None:
        assert control_plane.controller_manager.running(), control_plane.controller_manager.tail()


async def test_the_operator_starts_kopf_again_after_a_watch_is_refused(
    operator: OperatorProcess, kube: Kube, control_plane: ControlPlane, rbac: list[dict[str, Any]]
) -> None:
    """A watch refused outright (403, as while a restarted API server loads its RBAC) stops kopf; the
    operator starts it again, and objects declared after the refusal are handled."""
    binding = next(m for m in rbac if m["kind"] == "ClusterRoleBinding")
    path = f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding['metadata']['name']}"
    await kube.request("DELETE", path)
    try:
        # The watches reconnect to the restarted server without their grant: each gets a 403.
        await asyncio.to_thread(control_plane.stop_apiserver)
        await asyncio.to_thread(control_plane.start_apiserver)
        await wait_for(
            lambda: WATCH_REFUSED.search(operator.output(400)),
            what="kopf's line on a watch refused",
            within=60,
        )
    finally:
        await kube.create(binding)
    space = "after-refusal-space"
    await kube.create_object("Space", space, {"displayName": "After a refused watch"})
    await wait_for(lambda: ready_true(kube, "Space", space), what="Ready on the Space", within=90)
    assert operator.alive(), operator.output()
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{operator.port}/metrics") as response,
    ):
        metrics = await response.text()
    assert 'memory_mcp_operator_restarts_total{error="APIForbiddenError"}' in metrics
