"""Search over MCP through the cluster's Service, against `memory-mcp serve` on the same machine.

Stands up the cluster tier's node (tests/cluster/node.py: kubelet, containerd, the chart installed
by Helm, two server replicas, PostgreSQL beside the node), seeds a space through the Service with
an operator-made key, and runs bench.load's Python clients (the same closed loop as outside the
cluster) calling search_memory at each client count. Then it does the same against one
`memory-mcp serve` (embedded PostgreSQL) on this machine, in the same run, and prints both and
their ratio. Both share the machine's two cores with the clients; on the cluster each request also
crosses two socat relays (host loopback -> Unix socket -> the node's namespace) and kube-proxy's
rules, and two server pods share the cores with one PostgreSQL.

    python -m bench.cluster_load [--memories 300] [--clients 1,16] [--seconds 10]    # as root

Needs what scripts/cluster builds (the Kubernetes binaries and the images).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
from typing import Any

import yaml

from bench.common import serve_process
from bench.load import percentile, run_clients, seed, wait_ready
from tests.cluster.node import running_node
from tests.cluster.release import SECRET_NAMESPACE, install_release


def team(space: str) -> list[dict[str, Any]]:
    api = "memory-mcp.io/v1alpha1"
    return [
        {"apiVersion": api, "kind": "Space", "metadata": {"name": space}, "spec": {"displayName": "Load"}},
        {
            "apiVersion": api,
            "kind": "User",
            "metadata": {"name": "load-user"},
            "spec": {"email": "load@bench.test", "displayName": "Load", "role": "Writer"},
        },
        {
            "apiVersion": api,
            "kind": "ApiKey",
            "metadata": {"name": "load-key"},
            "spec": {
                "user": "load-user",
                "grants": [{"space": space, "access": "ReadWrite"}],
                "defaultSpace": space,
                "secretRef": {"namespace": SECRET_NAMESPACE, "name": "load-key"},
            },
        },
    ]


async def measure(base: str, key: str, args: argparse.Namespace) -> dict[int, list[float]]:
    await wait_ready(base)
    await seed(base, key, args.memories)
    url = f"{base}/mcp"
    await run_clients(url, key, "search_memory", 2, 2.0)  # warm-up
    return {n: await run_clients(url, key, "search_memory", n, args.seconds) for n in args.client_counts}


def line(where: str, clients: int, latencies: list[float], seconds: float) -> str:
    return (
        f"{where:<10}{clients:>8}{len(latencies) / seconds:>10.1f}"
        f"{statistics.median(latencies) * 1000:>9.1f}{percentile(latencies, 0.99) * 1000:>9.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=300)
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    args.client_counts = [int(c) for c in args.clients.split(",")]

    with running_node() as node:
        deployment = install_release(node)
        node.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(team("load")))
        key = deployment.secret_value(SECRET_NAMESPACE, "load-key", "api-key", timeout_s=120)
        on_cluster = asyncio.run(measure(deployment.base_url, key, args))
    with serve_process("memory-mcp-cluster-load-", stdout=subprocess.PIPE) as (_server, data_dir, port):
        base = f"http://127.0.0.1:{port}"
        asyncio.run(wait_ready(base))
        local_key = (data_dir / "bootstrap-key").read_text().strip()
        on_laptop = asyncio.run(measure(base, local_key, args))

    print(f"search_memory over MCP, {args.memories} memories, {args.seconds:.0f} s per run")
    print(f"{'where':<10}{'clients':>8}{'calls/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for n in args.client_counts:
        print(line("cluster", n, on_cluster[n], args.seconds))
        print(line("serve", n, on_laptop[n], args.seconds))
        p50 = statistics.median(on_cluster[n]) / statistics.median(on_laptop[n])
        p99 = percentile(on_cluster[n], 0.99) / percentile(on_laptop[n], 0.99)
        print(f"{'ratio':<10}{n:>8}{'':>10}{p50:>9.2f}{p99:>9.2f}   (cluster / serve)")


if __name__ == "__main__":
    main()
