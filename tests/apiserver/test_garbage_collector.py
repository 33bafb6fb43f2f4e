"""The ApiKey Secret's ownerReferences against kube-controller-manager's garbage collector.

A Secret is namespaced and its owner, the ApiKey, is cluster-scoped: the garbage collector accepts
that, but deletes a dependent whose owner it cannot find (a wrong uid, kind or apiVersion). So
the Secret must survive the collector while its ApiKey exists, and go when the ApiKey goes.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from typing import Any

import pytest

from tests.apiserver.controlplane import ControlPlane
from tests.apiserver.kube import GROUP_VERSION, Kube, wait_for
from tests.apiserver.support import SECRET_NAMESPACE, OperatorProcess, declare

pytestmark = pytest.mark.apiserver

# The collector rediscovers resources every 30 s, so a new CRD's kind may take that long to be
# watched; then it handles dependents within seconds.
WITHIN = 120.0


def secret(name: str, owner_references: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": SECRET_NAMESPACE, "ownerReferences": owner_references},
        "stringData": {"note": "made by the test"},
    }


async def test_the_secret_survives_the_collector_and_goes_with_its_apikey(
    operator: OperatorProcess, kube: Kube, control_plane: ControlPlane
) -> None:
    assert control_plane.controller_manager is not None and control_plane.controller_manager.running()
    d = await declare(kube, "gc")
    owned = await kube.secret(SECRET_NAMESPACE, d.secret)
    assert owned is not None
    references = owned["metadata"]["ownerReferences"]

    # A control that the collector is watching ApiKey owners: a Secret whose ApiKey owner does
    # not exist (right kind, unknown uid) is collected.
    dangling = copy.deepcopy(references)
    dangling[0].update(name="gc-never-existed", uid=str(uuid.uuid4()), blockOwnerDeletion=False)
    await kube.create(secret("gc-dangling", dangling))
    # A Secret the operator knows nothing about, with the same ownerReference as the operator's
    # Secret: only the collector can delete it.
    await kube.create(secret("gc-companion", references))

    await wait_for(
        lambda: _gone(kube, "gc-dangling"), what="the collector to delete the dangling Secret", within=WITHIN
    )
    # The collector had its look at the other two as well (they were created before the dangling
    # one was collected); give it a few more seconds to be sure, then both must still be there.
    await asyncio.sleep(5)
    assert await kube.secret_key(SECRET_NAMESPACE, d.secret) == d.key
    assert await kube.secret(SECRET_NAMESPACE, "gc-companion") is not None
    assert operator.alive(), operator.output()

    await kube.delete("ApiKey", d.apikey)
    await wait_for(lambda: _gone(kube, d.secret), what="the operator's Secret deleted", within=30)
    await wait_for(
        lambda: _gone(kube, "gc-companion"), what="the collector to delete the companion", within=WITHIN
    )
    assert references[0]["apiVersion"] == GROUP_VERSION
    assert control_plane.controller_manager.running(), control_plane.controller_manager.tail()


async def _gone(kube: Kube, name: str) -> bool:
    return await kube.secret(SECRET_NAMESPACE, name) is None
