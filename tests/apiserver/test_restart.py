"""The operator rides out an API-server restart: kube-apiserver stops and starts on the same etcd."""

from __future__ import annotations

import asyncio
import time

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
