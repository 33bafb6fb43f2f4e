"""Every failure of a command, as one line a person can act on: the one place errors become words.

Commands raise what they raise (the store's typed errors, a file that cannot be opened, a database
that cannot be reached); :class:`OneLineErrors` turns any of them into ``error: <what>`` on stderr
and exit code 1. Usage errors stay click's (exit code 2). ``memory-mcp --debug ...`` shows the
traceback instead.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup
from typer.exceptions import Abort, Exit, TyperException

# Where a mistyped name can be looked up: the command that lists that kind of object.
_LISTS = {"space": "memory-mcp space list", "user": "memory-mcp user list", "api key": "memory-mcp key list"}


def explain(exc: BaseException) -> str:
    """What went wrong, in one line that names the thing at fault, for an error of any type."""
    import psycopg
    from sqlalchemy.exc import DBAPIError

    from memory_mcp.store.errors import NotFound, SpaceNotFound, StoreError

    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return explain(exc.orig)
    if isinstance(exc, SpaceNotFound):
        return f"{exc} ({_LISTS['space']} shows them)"
    if isinstance(exc, NotFound) and exc.what in _LISTS:
        return f"{exc} ({_LISTS[exc.what]} shows them)"
    if isinstance(exc, StoreError):
        return str(exc)
    if isinstance(exc, psycopg.OperationalError):
        # The driver's first line names the host and port (never the password) and what failed there.
        reason = str(exc).splitlines()[0].removeprefix("connection failed: ")
        return f"cannot reach the database: {reason}; check --database-url or MEMORY_MCP_DATABASE_URL"
    if isinstance(exc, psycopg.Error):
        return f"the database refused: {str(exc).splitlines()[0]}"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"cannot use {exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text ({exc.reason} at byte {exc.start}): give a UTF-8 file"
    if _is_expected(exc):
        return str(exc)
    return f"unexpected {type(exc).__name__}: {exc} (run again with --debug for the traceback)"


# Errors of the embedder and the manifests say what to do in their message. Named, not imported: an
# image holds only its own components (the server's has no operator, the operator's no embedder),
# and the mapping of an error must not fail on a module that is not there.
_EXPECTED = {
    "memory_mcp.apply.ManifestError",
    "memory_mcp.embedder.client.EmbedderUnavailable",
    "memory_mcp.embedder.static.StaticModelUnavailable",
}


def _is_expected(exc: BaseException) -> bool:
    return any(f"{cls.__module__}.{cls.__qualname__}" in _EXPECTED for cls in type(exc).__mro__)


class OneLineErrors(TyperGroup):
    """The root command: what its commands raise ends as one line on stderr, unless ``--debug``."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (TyperException, Exit, Abort):
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            from memory_mcp.options import fail

            raise fail(explain(exc)) from None
