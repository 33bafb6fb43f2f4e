"""Outages survived: PostgreSQL killed under a running `serve`, `serve` itself killed, a database
that goes away and comes back. Real processes, real HTTP, real signals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from memory_mcp.core.database import PreparedDatabase, prepare_database
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import Embedder
from memory_mcp.store.access import Access
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import run_server
from tests.server.oauth_flow import Flow
from tests.server.test_oidc import Issuer, certificates, issuer  # noqa: F401 - fixtures
from tests.test_cli_serve import Served, postgres_running

RECOVERY_DEADLINE_S = 120
UNAVAILABLE = {"error": "DatabaseUnavailable", "message": "database unavailable, retry"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Outside pytest's private tmp dir: PostgreSQL runs as its own system user.
    path = Path(tempfile.mkdtemp(prefix="memory-mcp-outage-"))
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "pg" / "postmaster.pid").read_text().split("\n", 1)[0])


def stop_and_read_log(served: Served) -> str:
    served.proc.send_signal(signal.SIGTERM)
    _, err = served.proc.communicate(timeout=60)
    return err


class Outage:
    """What the server answered, request after request, from the moment the database went away."""

    def __init__(self, served: Served, key: str) -> None:
        self.http = httpx2.Client(base_url=served.base, timeout=30)
        self.auth = {"Authorization": f"Bearer {key}"}
        self.statuses: dict[str, list[int]] = {"rest": [], "mcp": [], "healthz": [], "readyz": []}

    def observe(self) -> bool:
        """One round of REST, MCP and both probes; True when REST and readiness answer 200."""
        rest = self.http.get("/v1/memories", headers=self.auth)
        self.statuses["rest"].append(rest.status_code)
        if rest.status_code != 200:
            assert rest.status_code == 503, rest.text
            assert UNAVAILABLE.items() <= rest.json().items()
            assert int(rest.headers["Retry-After"]) > 0
        mcp = self.http.post("/mcp", json=TOOLS_LIST, headers={**self.auth, **MCP_HEADERS})
        self.statuses["mcp"].append(mcp.status_code)
        if mcp.status_code != 200:
            assert mcp.status_code == 503, mcp.text
            assert UNAVAILABLE.items() <= mcp.json().items()
        self.statuses["healthz"].append(self.http.get("/healthz").status_code)
        ready = self.http.get("/readyz")
        self.statuses["readyz"].append(ready.status_code)
        if ready.status_code != 200:
            assert ready.json() == {"status": "unavailable", "reason": "database unavailable"}
        return rest.status_code == 200 and ready.status_code == 200

    def observe_until_recovered(self) -> None:
        """Observe until REST has failed at least once and then answers again."""
        deadline = time.monotonic() + RECOVERY_DEADLINE_S
        while time.monotonic() < deadline:
            if self.observe() and 503 in self.statuses["rest"]:
                return
            time.sleep(0.05)
        raise AssertionError(f"no recovery within {RECOVERY_DEADLINE_S} s: {self.statuses}")

    def save(self, content: str) -> None:
        saved = self.http.post("/v1/memories", json={"content": content}, headers=self.auth)
        assert saved.status_code == 200 and saved.json()["status"] == "saved", saved.text

    def contents(self) -> list[str]:
        listed = self.http.get("/v1/memories", headers=self.auth)
        assert listed.status_code == 200, listed.text
        return sorted(m["content"] for m in listed.json()["memories"])


def assert_outage_seen_and_survived(outage: Outage) -> None:
    statuses = outage.statuses
    assert 503 in statuses["rest"] and statuses["rest"][-1] == 200
    assert set(statuses["mcp"]) <= {200, 503} and 503 in statuses["mcp"]
    assert set(statuses["healthz"]) == {200}  # the process could recover all along: no restart
    assert 503 in statuses["readyz"] and statuses["readyz"][-1] == 200


def assert_outage_logged_once(log: str) -> None:
    """One line when the database went away and one when it came back: no traceback per request."""
    entries = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    messages = [entry["message"] for entry in entries]
    down = [m for m in messages if m.startswith("database unavailable")]
    back = [m for m in messages if m.startswith("database available again")]
    assert down and len(down) == len(back), messages
    assert not [entry for entry in entries if "exception" in entry], messages
    assert "Traceback" not in log and "DatabaseUnavailable" not in log


def test_postgres_killed_under_serve_is_restarted_and_requests_recover(data_dir: Path) -> None:
    served = Served(data_dir)
    try:
        outage = Outage(served, (data_dir / "bootstrap-key").read_text().strip())
        outage.save("Saved before PostgreSQL was killed.")
        old_pid = postmaster_pid(data_dir)
        os.kill(old_pid, signal.SIGKILL)
        outage.observe_until_recovered()
        assert served.proc.poll() is None  # recovered without restarting serve
        assert postmaster_pid(data_dir) != old_pid
        outage.save("Saved after PostgreSQL came back.")
        assert outage.contents() == [
            "Saved after PostgreSQL came back.",
            "Saved before PostgreSQL was killed.",
        ]
    finally:
        log = stop_and_read_log(served)
    assert_outage_seen_and_survived(outage)
    assert_outage_logged_once(log)
    assert "restarting it" in log and "embedded PostgreSQL restarted" in log
    assert not postgres_running(data_dir)


def test_serve_killed_leaves_no_postgres_behind_after_the_next_clean_stop(data_dir: Path) -> None:
    first = Served(data_dir)
    key = (data_dir / "bootstrap-key").read_text().strip()
    Outage(first, key).save("Saved before serve was killed.")
    first.proc.kill()
    first.proc.wait(timeout=30)
    assert postgres_running(data_dir)  # a crash cannot stop it: the next start must take it over
    assert first.proc.pid in json.loads((data_dir / "pg" / ".handle_pids.json").read_text())

    second = Served(data_dir)
    try:
        after = Outage(second, key)
        assert after.contents() == ["Saved before serve was killed."]
        after.save("Saved by the next serve.")
    finally:
        log = stop_and_read_log(second)
    assert second.proc.returncode is not None and "taking it over" in log
    assert not postgres_running(data_dir)

    third = Served(data_dir)  # and the one after that starts and stops as usual
    try:
        assert len(Outage(third, key).contents()) == 2
    finally:
        stop_and_read_log(third)
    assert not postgres_running(data_dir)


@pytest.fixture
def external() -> Iterator[PreparedDatabase]:
    """A migrated PostgreSQL that `serve` reaches by URL, which the test can stop and start."""
    root = Path(tempfile.mkdtemp(prefix="memory-mcp-external-"))
    prepared = prepare_database(Settings(data_dir=root))
    yield prepared
    prepared.stop()
    subprocess.run(["rm", "-rf", str(root)], check=False)


def test_pool_recovers_when_an_external_database_comes_back(
    data_dir: Path, external: PreparedDatabase
) -> None:
    assert external.embedded is not None
    served = Served(data_dir, MEMORY_MCP_DATABASE_URL=external.app_url)
    try:
        outage = Outage(served, (data_dir / "bootstrap-key").read_text().strip())
        outage.save("Saved before the database stopped.")
        external.embedded.stop()  # as an operator stops or fails over a database server
        assert not postgres_running(external.embedded.data_dir)
        for _ in range(3):
            assert not outage.observe()
        assert set(outage.statuses["rest"]) == {503}
        external.embedded.start()
        outage.observe_until_recovered()
        outage.save("Saved after the database came back.")
        assert len(outage.contents()) == 2
    finally:
        log = stop_and_read_log(served)
    assert_outage_seen_and_survived(outage)
    assert_outage_logged_once(log)


# --- auth outages never sign anyone out -----------------------------------------------------------
# A 401 with error="invalid_token" tells a client its credential is dead: it drops it and signs its
# person out. While what judges a credential is away, the answer is 503 with Retry-After instead.


def _oauth_token(base: str, key: str) -> str:
    async def sign_in() -> str:
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            flow = Flow(http)
            await flow.register()
            tokens = await flow.tokens(key)
        token: str = tokens["access_token"]
        return token

    return asyncio.run(sign_in())


def assert_retry_later(answer: httpx2.Response) -> None:
    """503, Retry-After, and nothing that would make a client drop its credential."""
    assert answer.status_code == 503, answer.text
    assert int(answer.headers["Retry-After"]) > 0
    assert "www-authenticate" not in answer.headers
    assert "invalid_token" not in answer.text


def test_an_oauth_access_token_is_answered_503_while_the_database_is_down_and_works_after(
    data_dir: Path, external: PreparedDatabase
) -> None:
    assert external.embedded is not None
    served = Served(data_dir, MEMORY_MCP_DATABASE_URL=external.app_url)
    try:
        key = (data_dir / "bootstrap-key").read_text().strip()
        token = _oauth_token(served.base, key)
        bearer = {"Authorization": f"Bearer {token}"}
        with httpx2.Client(base_url=served.base, timeout=30) as http:
            assert http.post("/mcp", json=TOOLS_LIST, headers={**bearer, **MCP_HEADERS}).status_code == 200
            external.embedded.stop()
            for _ in range(3):
                assert_retry_later(http.post("/mcp", json=TOOLS_LIST, headers={**bearer, **MCP_HEADERS}))
                rest = http.get("/v1/memories", headers=bearer)
                assert_retry_later(rest)
                assert UNAVAILABLE.items() <= rest.json().items()
            external.embedded.start()
            deadline = time.monotonic() + RECOVERY_DEADLINE_S
            while (answer := http.get("/v1/memories", headers=bearer)).status_code == 503:
                assert time.monotonic() < deadline, "no recovery"
                time.sleep(0.2)
            assert answer.status_code == 200, answer.text  # the same token, never dropped
            assert http.post("/mcp", json=TOOLS_LIST, headers={**bearer, **MCP_HEADERS}).status_code == 200
    finally:
        stop_and_read_log(served)


async def test_a_provider_token_is_answered_503_while_the_providers_keys_are_out_of_reach(
    db_urls: tuple[str, str],
    embedder: Embedder,
    issuer: Issuer,  # noqa: F811 - the fixture imported above
) -> None:
    async with run_server(
        db_urls[0],
        embedder,
        oauth_issuer=issuer.url,
        oauth_issuer_allow_loopback=True,
        oauth_issuer_refetch_s=2,
    ) as server:
        await make_space(server.db, "notes")
        await make_key(server.db, await make_user(server.db, "ada"), {"notes": Access.READ}, "notes")
        token = issuer.token(server.mcp_url, email="ada@example.com")
        async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:

            async def tools_list(credential: str) -> httpx2.Response:
                headers = {**MCP_HEADERS, "Authorization": f"Bearer {credential}"}
                return await http.post("/mcp", json=TOOLS_LIST, headers=headers)

            assert (await tools_list(token)).status_code == 200
            # The provider goes away and rotates its key meanwhile: a token of the new key cannot be
            # checked (the old key set lacks it and the provider is not there to ask).
            issuer.publish("k2")
            published = dict(issuer.https.documents)
            rotated = issuer.token(server.mcp_url, kid="k2", email="ada@example.com")
            issuer.https.documents.clear()
            await asyncio.sleep(2)  # a key id the keys lack is asked for at most every refetch_s
            refused = await tools_list(rotated)
            assert_retry_later(refused)
            assert int(refused.headers["Retry-After"]) <= 2  # when the provider is asked again
            assert (await tools_list(token)).status_code == 200  # a key still held keeps working
            # Back with the new key: after the wait, the same token is taken.
            issuer.https.documents.update(published)
            await asyncio.sleep(int(refused.headers["Retry-After"]))
            assert (await tools_list(rotated)).status_code == 200
