"""The observability tests run against the same real server as tests/server."""

from __future__ import annotations

from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, server

__all__ = ["server", "writer_key"]

SPACE = "observed"


async def writer_key(running: RunningServer) -> str:
    """A Writer's key with ReadWrite on SPACE (its default space)."""
    await make_space(running.db, SPACE)
    user = await make_user(running.db)
    return await make_key(running.db, user, {SPACE: "ReadWrite"}, default=SPACE)
