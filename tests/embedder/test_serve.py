"""The Ray Serve deployment, run for real on the CPU and called over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx2
import pytest

pytest.importorskip("ray")

from memory_mcp.embedder.client import RemoteEmbedder
from memory_mcp.embedder.model import PACKAGED_MODEL_NAME, encode
from memory_mcp.embedder.serve import (
    EmbedderServiceConfig,
    run_embedder_service,
    stop_embedder_service,
)

from memory_mcp.settings import Settings
from tests.embedder.support import SENTENCES, cosine, free_port

MAX_BATCH = 16
METRICS_PORT = free_port()


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    url = run_embedder_service(
        Settings(embedder_metrics_port=METRICS_PORT),
        host="127.0.0.1",
        port=free_port(),
        num_cpus=1,
        max_batch_size=MAX_BATCH,
        batch_wait_timeout_s=0.01,
        ray_num_cpus=2,
        block=False,
    )
    try:
        yield url
    finally:
        stop_embedder_service()


async def test_concurrent_http_requests_are_batched_and_match_in_process_vectors(service_url, model):
    texts = SENTENCES[:32]
    async with httpx2.AsyncClient(base_url=service_url, timeout=60) as client:
        info = (await client.get("/info")).json()
        responses = await asyncio.gather(*(client.post("/embed", json={"texts": [text]}) for text in texts))

    assert info["dim"] == 384
    assert info["model"] == PACKAGED_MODEL_NAME
    bodies = [response.json() for response in responses]
    assert all(response.status_code == 200 for response in responses)
    batch_sizes = [body["batch_size"] for body in bodies]
    assert max(batch_sizes) > 1
    assert max(batch_sizes) <= MAX_BATCH
    local = encode(model, texts)
    for body, expected in zip(bodies, local, strict=True):
        assert body["dim"] == 384
        assert cosine(body["vectors"][0], expected) >= 0.999


async def test_replica_exports_batch_metrics(service_url):
    async with httpx2.AsyncClient(timeout=30) as client:
        await asyncio.gather(
            *(client.post(f"{service_url}/embed", json={"texts": [t]}) for t in SENTENCES[:16])
        )
        scraped = (await client.get(f"http://127.0.0.1:{METRICS_PORT}/metrics")).text
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in scraped.splitlines()
        if not line.startswith("#")
    }
    assert samples["memory_mcp_embedder_batch_size_count"] >= 1
    assert samples["memory_mcp_embedder_batch_size_sum"] >= 16
    assert samples["memory_mcp_embedder_encode_seconds_count"] >= 1


async def test_remote_embedder_agrees_with_the_model(service_url, model):
    embedder = await RemoteEmbedder.connect(service_url, timeout_s=30, query_cache_size=4)
    try:
        assert (embedder.dim, embedder.name) == (384, PACKAGED_MODEL_NAME)
        vectors = await embedder.embed(SENTENCES[:20])
        query = await embedder.embed_query("which team owns the alerts?")
        again = await embedder.embed_query("which team owns the alerts?")
    finally:
        await embedder.aclose()

    expected = encode(model, SENTENCES[:20])
    assert all(cosine(got, want) >= 0.999 for got, want in zip(vectors, expected, strict=True))
    assert again == query
    assert cosine(query, encode(model, ["which team owns the alerts?"])[0]) >= 0.999
    assert embedder.cache_info().hits == 1


async def test_a_malformed_request_is_refused_with_a_client_error(service_url):
    async with httpx2.AsyncClient(base_url=service_url, timeout=30) as client:
        response = await client.post("/embed", json={"text": "no list"})
    assert response.status_code == 422


def test_config_refuses_a_concurrency_cap_below_the_batch_size():
    with pytest.raises(ValueError, match="max_ongoing_requests"):
        EmbedderServiceConfig(max_batch_size=64, max_ongoing_requests=5)


def test_gpus_switch_the_device_to_cuda():
    assert EmbedderServiceConfig(num_gpus=1).resolved_device == "cuda"
    assert EmbedderServiceConfig(num_gpus=0, device="cpu").resolved_device == "cpu"
