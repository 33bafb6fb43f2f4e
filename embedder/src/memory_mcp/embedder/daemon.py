"""Work in a daemon thread, awaited from the event loop: for start-up steps that a stop must not wait for.

``asyncio.to_thread`` runs in the loop's default executor, whose threads the loop joins when it
closes and Python joins again at exit: a stop during the model's loading (seconds on an idle
machine, tens of seconds on a busy one) waited for the loading to end. A daemon thread is left
behind instead; the process exits without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def in_daemon_thread(work: Callable[..., T], *args: Any, name: str) -> T:
    """``work(*args)`` in a new daemon thread called ``name``; its result or its exception."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: no one waits any more
            loop.call_soon_threadsafe(outcome)

    def run() -> None:
        try:
            result = work(*args)
        except BaseException as exc:  # handed to the awaiting task as it is
            error = exc
            settle(lambda: None if future.done() else future.set_exception(error))
        else:
            settle(lambda: None if future.done() else future.set_result(result))

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future
