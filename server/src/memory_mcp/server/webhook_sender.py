"""Sending a webhook delivery: the receiver's address checked as client metadata documents' are.

A receiver must be https on a public address; loopback (https or http) only where the client
metadata setting allows loopback (``oauth_cimd_allow_loopback``: development and tests). Every
address the name resolves to is checked before a send, again at most a second later, so a name that
later points inward is refused then.
"""

from __future__ import annotations

import time

import httpx2

# The check lives in the store so that the command line and the operator use this same one.
from memory_mcp.store.webhooks import SEND_TIMEOUT_S, Sender
from memory_mcp.store.webhooks import ReceiverRefused as ReceiverRefused
from memory_mcp.store.webhooks import check_receiver as check_receiver

# A receiver's address check holds this long for the sends that follow it (a batch of one webhook's
# events): a name lookup per event was most of a delivery's CPU at 50 events a second.
CHECK_HOLDS_S = 1.0


def sender(allow_loopback: bool) -> Sender:
    """A ``webhooks.Sender`` that checks the receiver, then POSTs; a non-2xx answer is a failure."""

    # One client for every send: its connections stay open between deliveries to a receiver.
    http = httpx2.AsyncClient(timeout=SEND_TIMEOUT_S, follow_redirects=False)
    checked: dict[str, float] = {}  # URL: until when its last check holds

    async def send(url: str, headers: dict[str, str], body: bytes) -> None:
        if checked.get(url, 0.0) < time.monotonic():
            await check_receiver(url, allow_loopback)
            checked[url] = time.monotonic() + CHECK_HOLDS_S
        answer = await http.post(url, content=body, headers=headers)
        if not 200 <= answer.status_code < 300:
            raise ReceiverRefused(f"the receiver answered {answer.status_code}")

    return send
