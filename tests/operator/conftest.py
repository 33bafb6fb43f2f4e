"""Fixtures: kmock's Kubernetes emulator with the CRDs, and the real operator running against it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.operator.support import Cluster, Emulator, RunningOperator, running_operator


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    emulator = Emulator()
    emulator.start()
    assert emulator.started.wait(15), "the Kubernetes emulator did not start"
    try:
        async with aiohttp.ClientSession() as session:
            yield Cluster(emulator, session)
    finally:
        emulator.stop()


@pytest.fixture
async def operator(cluster: Cluster, db_urls: tuple[str, str]) -> AsyncIterator[RunningOperator]:
    async with running_operator(cluster, db_urls) as running:
        yield running
