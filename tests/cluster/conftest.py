"""The cluster tier: the chart installed by the real Helm engine onto a real node (tests/cluster/node.py).

One node serves the whole session: the images built by ``scripts/cluster`` are imported into its
containerd, PostgreSQL runs beside it, and the chart is installed with two server replicas, the
operator, the migration Job and the in-process embedder (tests/cluster/release.py). Tests reach the
server through its Service (a relay from the host's loopback into the node's network namespace)
and the API server through kubectl, as a platform team would.

Run it with ``scripts/cluster-test`` (builds what is missing first) or, once built,
``python -m pytest -m cluster tests/cluster``. Without the parts every test fails, saying which
command provides them; it never skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.cluster.node import Node, NodeMissing, running_node
from tests.cluster.release import Deployment, ImagesMissing, install_release


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def node() -> Iterator[Node]:
    try:
        with running_node() as running:
            yield running
    except NodeMissing as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture(scope="session")
def deployment(node: Node) -> Deployment:
    try:
        return install_release(node)
    except ImagesMissing as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture
def http(deployment: Deployment) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=deployment.base_url, timeout=30) as client:
        yield client
