"""Sending a webhook delivery: the receiver's address checked as client metadata documents' are.

A receiver must be https on a public address; loopback (https or http) only where the client
metadata setting allows loopback (``oauth_cimd_allow_loopback``: development and tests). Every
address the name resolves to is checked at each send, so a name that later points inward is
refused then.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

import httpx2

from memory_mcp.store.webhooks import Sender

from .oauth_cimd import _address_refused

SEND_TIMEOUT_S = 5.0


class ReceiverRefused(Exception):
    """The URL is no receiver this server sends to (scheme, credentials, address)."""


async def check_receiver(url: str, allow_loopback: bool) -> None:
    """Refuse a receiver URL that is not https to a public address (loopback: see the module)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host or parts.username or parts.password or parts.scheme not in ("https", "http"):
        raise ReceiverRefused("the webhook URL must be https://host/path, without credentials")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ReceiverRefused("the webhook URL has no valid port") from None
    try:
        async with asyncio.timeout(SEND_TIMEOUT_S):
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        raise ReceiverRefused("the webhook host does not resolve") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses or any(_address_refused(a, allow_loopback) for a in addresses):
        raise ReceiverRefused("the webhook URL points at a private or local address")
    if parts.scheme == "http" and not all(ipaddress.ip_address(a).is_loopback for a in addresses):
        raise ReceiverRefused("the webhook URL must be https (http only to loopback)")


def sender(allow_loopback: bool) -> Sender:
    """A ``webhooks.Sender`` that checks the receiver, then POSTs; a non-2xx answer is a failure."""

    # One client for every send: its connections stay open between deliveries to a receiver.
    http = httpx2.AsyncClient(timeout=SEND_TIMEOUT_S, follow_redirects=False)

    async def send(url: str, headers: dict[str, str], body: bytes) -> None:
        await check_receiver(url, allow_loopback)
        answer = await http.post(url, content=body, headers=headers)
        if not 200 <= answer.status_code < 300:
            raise ReceiverRefused(f"the receiver answered {answer.status_code}")

    return send
