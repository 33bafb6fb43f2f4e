"""mem0's memories: what its ``get_all`` (or the platform's export) returns, as JSON or JSON lines.

Either a list of memories, or an object holding them under ``results`` (mem0 1.1 and later, beside
``relations``) or ``memories``. A memory has ``id``, ``memory`` (its text), ``user_id``,
``agent_id``, ``run_id``, ``metadata``, ``categories`` (a list of words), ``created_at`` and
``updated_at`` (ISO 8601, with or without a zone).

What becomes what: the memories of one owner (the same user, agent and run) make one document
titled after them ("mem0: user alice, agent travel-bot"), so who they were about is kept; each
memory is a memory of that document, dated as in mem0, with its first category as its category
(a memory here has one). ``metadata`` has no place here and is not imported; ``hash``, ``score``
and ``relations`` are mem0's own and are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from ..errors import ValidationError
from .base import Builder, Part, from_iso, short
from .budget import RECORD_BYTES
from .bundle import Bundle

OWNERS = ("user_id", "agent_id", "run_id", "app_id")
LISTS = ("results", "memories")  # where an object holds the memories (mem0 1.1 and later: results)


def parse(bundle: Bundle, builder: Builder) -> None:
    name = bundle.pick("memories.json")
    if name is None:
        raise ValidationError("file", "give mem0's JSON (a list of memories, or an object with 'results')")
    groups: dict[tuple[str, ...], list[tuple[Part, datetime | None]]] = {}
    for index, item in enumerate(_items(bundle, name, builder), start=1):
        text = item.get("memory") if isinstance(item, Mapping) else None
        if not isinstance(text, str):
            builder.skip(f"memory {index}", "no 'memory' text; not imported")
            continue
        key = str(item.get("id") or index)
        where = f"memory {key}"
        categories = item.get("categories")
        first = categories[0] if isinstance(categories, list) and categories else None
        created = from_iso(item.get("created_at"))
        part = Part(
            text=text,
            where=where,
            created_at=created,
            updated_at=from_iso(item.get("updated_at")),
            category=builder.category(first, where),
        )
        owner = tuple(
            f"{o.removesuffix('_id')} {item[o]}" for o in OWNERS if isinstance(item.get(o), str | int)
        )
        groups.setdefault(owner, []).append((part, created))
        builder.meter.hold(RECORD_BYTES + len(text))  # held until its owner's document is made
    for owner, members in groups.items():
        members.sort(key=lambda m: (m[1] is None, m[1] or datetime.min))
        dates = [m[1] for m in members if m[1] is not None]
        label = ", ".join(owner) or "no owner"
        builder.document(
            ["owner", *owner],
            f"mem0: {short(label, 150)}",
            [m[0] for m in members],
            f"mem0 memories of {label}",
            created_at=min(dates) if dates else None,
            updated_at=max(dates) if dates else None,
        )


def _items(bundle: Bundle, name: str, builder: Builder) -> Iterator[Any]:
    """The memories one at a time: of JSON lines, of a list, or of the list an object holds under
    ``results`` (or ``memories``); what is held is one memory, not the file."""
    if bundle.json_lines(name):
        for number, line in bundle.lines(name):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                builder.skip(f"line {number}", f"not valid JSON ({exc.msg}); not imported")
            except RecursionError:
                builder.skip(f"line {number}", "nested too deeply to read; not imported")
        return
    reader = bundle.json(name)
    listed = False
    if reader.peek() == "[":
        listed = True
        yield from reader.items()
    elif reader.peek() == "{":
        for member in reader.members():
            if member in LISTS and not listed and reader.peek() == "[":
                listed = True
                yield from reader.items()
    else:
        reader.value()
    reader.end()
    if not listed:
        raise ValidationError("file", f"{name}: expected a list of memories, or an object with 'results'")
