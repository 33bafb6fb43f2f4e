"""The in-process micro-batcher, driven by the real model."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, cast

import pytest

from memory_mcp.embedder.batcher import BatcherClosed, MicroBatcher
from memory_mcp.embedder.model import encode, encode_mixed
from tests.embedder.support import SENTENCES, cosine


@pytest.fixture
async def batcher(model):
    batcher = MicroBatcher(functools.partial(encode_mixed, model), max_batch=64, max_wait_s=0.005)
    await batcher.start()
    yield batcher
    await batcher.stop()


async def test_concurrent_calls_share_forward_passes_and_get_their_own_vectors(batcher, model):
    texts = SENTENCES[:32]
    results = await asyncio.gather(*(batcher.embed([text]) for text in texts))

    assert batcher.stats.requests == 32
    assert batcher.stats.forward_passes < 32
    assert batcher.stats.largest_batch > 1
    for text, result in zip(texts, results, strict=True):
        assert result.shape == (1, 384)
        assert cosine(result[0], encode(model, [text])[0]) >= 0.999


async def test_multi_text_requests_keep_their_order_and_batches_stay_within_max(model):
    batcher = MicroBatcher(functools.partial(encode_mixed, model), max_batch=16, max_wait_s=0.005)
    await batcher.start()
    try:
        chunks = [SENTENCES[i : i + 5] for i in range(0, 30, 5)]
        results = await asyncio.gather(*(batcher.embed(chunk) for chunk in chunks))
    finally:
        await batcher.stop()

    assert batcher.stats.largest_batch <= 16
    assert batcher.stats.forward_passes < len(chunks)
    for chunk, result in zip(chunks, results, strict=True):
        alone = encode(model, chunk)
        assert result.shape == alone.shape
        assert all(cosine(a, b) >= 0.999 for a, b in zip(result, alone, strict=True))


async def test_a_failed_forward_pass_reaches_every_caller_in_the_batch(batcher):
    # A non-string makes the real tokenizer fail the whole forward pass.
    calls = [batcher.embed([text]) for text in SENTENCES[:7]]
    calls.append(batcher.embed(cast(Any, [12345])))
    results = await asyncio.gather(*calls, return_exceptions=True)

    assert batcher.stats.forward_passes == 1
    assert all(isinstance(result, ValueError) for result in results)
    # The batcher survives a failed batch.
    assert (await batcher.embed(["still working"])).shape == (1, 384)


async def test_stop_finishes_queued_work_and_then_refuses_new_requests(model):
    batcher = MicroBatcher(functools.partial(encode_mixed, model), max_batch=4, max_wait_s=0.005)
    await batcher.start()
    pending = [asyncio.ensure_future(batcher.embed([text])) for text in SENTENCES[:10]]
    await asyncio.sleep(0)
    await batcher.stop()

    assert all(task.done() and task.result().shape == (1, 384) for task in pending)
    with pytest.raises(BatcherClosed):
        await batcher.embed(["too late"])


async def test_queries_and_passages_share_a_batch_and_each_get_their_own_encoding(e5_model):
    batcher = MicroBatcher(functools.partial(encode_mixed, e5_model), max_batch=64, max_wait_s=0.005)
    await batcher.start()
    try:
        texts = SENTENCES[:8]
        # Queued together before the loop runs: one batch holds both kinds.
        calls = [batcher.embed([t]) for t in texts] + [batcher.embed([t], kind="query") for t in texts]
        results = await asyncio.gather(*calls)
    finally:
        await batcher.stop()

    assert batcher.stats.forward_passes == 1
    assert batcher.stats.largest_batch == 16
    passages, queries = results[:8], results[8:]
    for text, passage, query in zip(texts, passages, queries, strict=True):
        assert cosine(passage[0], encode(e5_model, [text], "passage")[0]) >= 0.999
        assert cosine(query[0], encode(e5_model, [text], "query")[0]) >= 0.999
        assert cosine(passage[0], query[0]) < 0.99
