"""Sending a webhook delivery: the receiver's address checked as client metadata documents' are.

A receiver must be https on a public address; loopback (https or http) only where the client
metadata setting allows loopback (``oauth_cimd_allow_loopback``: development and tests). Every
address the name resolves to is checked before a send, again at most a second later, so a name that
later points inward is refused then. The connection goes to an address that check approved: the
send never looks the name up again, so a name that answers a public address to the check and a
private one to the send (DNS rebinding) still reaches only the public one. TLS still verifies the
certificate against the name.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import httpcore2
import httpx2

# The check lives in the store so that the command line and the operator use this same one.
from memory_mcp.store.webhooks import SEND_TIMEOUT_S, Sender
from memory_mcp.store.webhooks import ReceiverRefused as ReceiverRefused
from memory_mcp.store.webhooks import check_receiver as check_receiver

# A receiver's address check holds this long for the sends that follow it (a batch of one webhook's
# events): a name lookup per event was most of a delivery's CPU at 50 events a second.
CHECK_HOLDS_S = 1.0


class _CheckedAddresses(httpcore2.AsyncNetworkBackend):
    """Connects a host's connections to the addresses its last check approved, and nowhere else."""

    def __init__(self) -> None:
        self.approved: dict[str, list[str]] = {}
        self._backend = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (the backend interface names it)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = self.approved.get(host.strip("[]").lower())
        if not addresses:
            raise httpcore2.ConnectError(f"{host} has no checked address")
        error: Exception | None = None
        for address in addresses:
            try:
                return await self._backend.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as e:
                error = e
        assert error is not None
        raise error

    async def connect_unix_socket(self, *args: object, **kwargs: object) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("webhooks are sent over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class _Transport(httpx2.AsyncHTTPTransport):
    def __init__(self, backend: _CheckedAddresses) -> None:
        super().__init__()
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(),
            max_connections=100,
            keepalive_expiry=5.0,
            network_backend=backend,
        )


def sender(allow_loopback: bool) -> Sender:
    """A ``webhooks.Sender`` that checks the receiver, then POSTs to an address the check approved;
    a non-2xx answer is a failure."""

    # One client for every send: its connections stay open between deliveries to a receiver.
    backend = _CheckedAddresses()
    http = httpx2.AsyncClient(transport=_Transport(backend), timeout=SEND_TIMEOUT_S, follow_redirects=False)
    checked: dict[str, float] = {}  # URL: until when its last check holds

    async def send(url: str, headers: dict[str, str], body: bytes) -> None:
        if checked.get(url, 0.0) < time.monotonic():
            host = (httpx2.URL(url).host or "").lower()
            backend.approved[host] = await check_receiver(url, allow_loopback)
            checked[url] = time.monotonic() + CHECK_HOLDS_S
        answer = await http.post(url, content=body, headers=headers)
        if not 200 <= answer.status_code < 300:
            raise ReceiverRefused(f"the receiver answered {answer.status_code}")

    return send
