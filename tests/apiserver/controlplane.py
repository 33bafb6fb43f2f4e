"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager.

The binaries come from ``scripts/kube-apiserver`` (kube-apiserver and kube-controller-manager
v1.20.2 built from Debian's source package into a cache folder; etcd from Debian's
``etcd-server``). Every process listens on 127.0.0.1 only, on free ports, with its data in a
temporary folder. The API server serves TLS with a certificate of a CA made here with openssl,
authenticates by static bearer tokens and authorizes with RBAC only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KUBE_VERSION = "1.20.2"
BUILD_SCRIPT = "scripts/kube-apiserver"
# The identities of the token file: the admin (system:masters) the tests and the controller
# manager use, and the groups a service account's token carries.
ADMIN_USER = "memory-mcp-test-admin"
SERVICE_ACCOUNT_GROUPS = ("system:serviceaccounts",)


def kube_dir() -> Path:
    """The cache folder scripts/kube-apiserver builds into (same default, same variable)."""
    if override := os.environ.get("MEMORY_MCP_KUBE_DIR"):
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "memory-mcp" / f"kube-{KUBE_VERSION}"


class ControlPlaneMissing(Exception):
    """A binary the tier needs is not there; the message says how to build or install it."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    apiserver: Path
    controller_manager: Path | None


def find_binaries() -> Binaries:
    """The binaries, or :class:`ControlPlaneMissing` naming the command that provides them."""
    bin_dir = kube_dir() / "bin"
    apiserver = bin_dir / "kube-apiserver"
    controller_manager = bin_dir / "kube-controller-manager"
    etcd = shutil.which("etcd") or "/usr/bin/etcd"
    missing = [str(p) for p in (apiserver, controller_manager, Path(etcd)) if not os.access(p, os.X_OK)]
    if missing:
        raise ControlPlaneMissing(
            f"the API-server tier needs {', '.join(missing)}: run {BUILD_SCRIPT} first (it installs "
            f"etcd-server and builds kube-apiserver v{KUBE_VERSION} and kube-controller-manager into "
            f"{bin_dir}, about 10 minutes the first time; MEMORY_MCP_KUBE_DIR moves that folder)"
        )
    if shutil.which("openssl") is None:
        raise ControlPlaneMissing(f"the API-server tier needs openssl: run {BUILD_SCRIPT} first")
    return Binaries(Path(etcd), apiserver, controller_manager)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(folder: Path, extra_ips: tuple[str, ...] = ()) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost (and ``extra_ips``), and the service-account signing key."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=folder)
    _openssl(
        *("req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "2"),
        *("-subj", "/CN=memory-mcp-test-ca", "-out", "ca.crt"),
        cwd=folder,
    )
    (folder / "serving.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc"
        + "".join(f",IP:{ip}" for ip in extra_ips)
        + "\n"
    )
    _openssl("genrsa", "-out", "serving.key", "2048", cwd=folder)
    _openssl(
        "req", "-new", "-key", "serving.key", "-subj", "/CN=kube-apiserver", "-out", "serving.csr", cwd=folder
    )
    _openssl(
        *("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial"),
        *("-days", "2", "-sha256", "-extfile", "serving.ext", "-out", "serving.crt"),
        cwd=folder,
    )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)


@dataclass(frozen=True)
class Identity:
    """A static token and who the API server takes its bearer for."""

    name: str
    token: str
    uid: str
    groups: tuple[str, ...]

    def csv_line(self) -> str:
        return f'{self.token},{self.name},{self.uid},"{",".join(self.groups)}"'


def service_account_identity(namespace: str, name: str) -> Identity:
    """A token the API server takes for ``namespace/name``'s service account (RBAC matches it)."""
    return Identity(
        name=f"system:serviceaccount:{namespace}:{name}",
        token=os.urandom(16).hex(),
        uid=f"sa-{namespace}-{name}",
        groups=(*SERVICE_ACCOUNT_GROUPS, f"system:serviceaccounts:{namespace}"),
    )


class Process:
    """One control-plane process, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name, self.argv, self.log = name, argv, log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as output:
            output.write(f"--- start {time.strftime('%H:%M:%S')}\n".encode())
            output.flush()
            self.popen = subprocess.Popen(
                self.argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.popen = None

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager running only the garbage collector)."""

    def __init__(self, root: Path, binaries: Binaries, tokens: list[Identity]) -> None:
        self.root = root
        self.binaries = binaries
        self.pki = root / "pki"
        self.admin = Identity(ADMIN_USER, os.urandom(16).hex(), "admin", ("system:masters",))
        self.identities = [self.admin, *tokens]
        self.etcd_port, self.etcd_peer_port, self.port = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        make_certificates(self.pki)
        (root / "tokens.csv").write_text("".join(i.csv_line() + "\n" for i in self.identities))
        (root / "tokens.csv").chmod(0o600)
        self.ssl = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        self.etcd = Process("etcd", self._etcd_argv(), root / "etcd.log")
        self.apiserver = Process("kube-apiserver", self._apiserver_argv(), root / "kube-apiserver.log")
        self.admin_kubeconfig = self.write_kubeconfig(root / "admin.kubeconfig", self.admin)
        self.controller_manager = (
            Process(
                "kube-controller-manager",
                self._controller_manager_argv(),
                root / "kube-controller-manager.log",
            )
            if binaries.controller_manager
            else None
        )

    # --- command lines ---------------------------------------------------------------------------

    def _etcd_argv(self) -> list[str]:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(self.binaries.etcd),
            *("--name", "memory-mcp-test", "--data-dir", str(self.root / "etcd")),
            *("--listen-client-urls", client, "--advertise-client-urls", client),
            *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
            *("--initial-cluster", f"memory-mcp-test={peer}", "--initial-cluster-state", "new"),
            "--logger=zap",
            "--log-level=warn",
        ]

    def _apiserver_argv(self) -> list[str]:
        pki = self.pki
        return [
            str(self.binaries.apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            "--insecure-port=0",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--token-auth-file={self.root / 'tokens.csv'}",
            "--anonymous-auth=false",
            "--authorization-mode=RBAC",
            # Setting an ownerReference with blockOwnerDeletion needs update on the owner's
            # finalizers: the chart's ClusterRole says it grants that, so enforce it.
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,OwnerReferencesPermissionEnforcement",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.252.0.0/24",
            "--profiling=false",
            "--logtostderr=true",
            "--v=1",
        ]

    def _controller_manager_argv(self) -> list[str]:
        assert self.binaries.controller_manager is not None
        return [
            str(self.binaries.controller_manager),
            f"--kubeconfig={self.admin_kubeconfig}",
            "--controllers=garbagecollector",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            "--port=0",
            "--secure-port=0",
            "--bind-address=127.0.0.1",
            "--logtostderr=true",
            "--v=1",
        ]

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.etcd.start()
        self._wait(self._etcd_healthy, self.etcd, 30, "etcd /health")
        self.start_apiserver()
        if self.controller_manager is not None:
            self.controller_manager.start()
            time.sleep(0.5)
            if not self.controller_manager.running():
                raise RuntimeError(f"kube-controller-manager exited:\n{self.controller_manager.tail()}")

    def start_apiserver(self, timeout: float = 90.0) -> None:
        self.apiserver.start()
        self._wait(self.ready, self.apiserver, timeout, "kube-apiserver /readyz")

    def stop_apiserver(self) -> None:
        self.apiserver.stop()

    def stop(self) -> None:
        for process in (self.controller_manager, self.apiserver, self.etcd):
            if process is not None:
                process.stop()

    def _wait(self, check: Any, process: Process, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process.running():
                raise RuntimeError(f"{process.name} exited before {what} answered:\n{process.tail()}")
            if check():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{what} did not answer within {timeout:.0f} s:\n{process.tail()}")

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=2) as r:
                return bool(json.load(r).get("health") == "true")
        except (OSError, ValueError):
            return False

    def ready(self) -> bool:
        """GET /readyz as the admin: every post-start hook (RBAC bootstrap included) has run."""
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.admin.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2, context=self.ssl) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.HTTPError):
            return False

    # --- clients ---------------------------------------------------------------------------------

    def write_kubeconfig(self, path: Path, identity: Identity) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "memory-mcp-test",
                    "cluster": {"server": self.url, "certificate-authority": str(self.pki / "ca.crt")},
                }
            ],
            "users": [{"name": identity.name, "user": {"token": identity.token}}],
            "contexts": [
                {"name": "memory-mcp-test", "context": {"cluster": "memory-mcp-test", "user": identity.name}}
            ],
            "current-context": "memory-mcp-test",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def logs(self) -> str:
        parts = []
        for process in (self.etcd, self.apiserver, self.controller_manager):
            if process is not None:
                parts.append(f"--- {process.name} ({process.log}):\n{process.tail()}")
        return "\n".join(parts)


@contextlib.contextmanager
def running_control_plane(root: Path, binaries: Binaries, tokens: list[Identity]) -> Any:
    plane = ControlPlane(root, binaries, tokens)
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
