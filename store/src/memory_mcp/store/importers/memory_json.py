"""The reference MCP memory server's ``memory.json``: read, and written by ``export --format memory-json``.

The file is JSON lines, one object each: ``{"type": "entity", "name", "entityType",
"observations": [...]}`` or ``{"type": "relation", "from", "to", "relationType"}``. (Early versions
wrote one object ``{"entities": [...], "relations": [...]}``; it is read too.)

Reading another tool's file: an entity is a document titled with its name; each observation is a
memory of it, written "name: observation" so that it says whom it is about, with the entity type as
its category. A relation is a memory of its own, "from relation to" (``works_at`` read as "works
at"), in the category ``relation``. The file has no dates: the memories are dated by the import.

Writing a space: one entity per category (named after it; ``uncategorised`` for memories without
one, of type ``memory``), each live memory an observation, verbatim. What the format has no field
for (each memory's category, version and dates) travels in a ``memoryMcp`` member of the entity,
one object per observation; the reference server ignores members it does not know, and an import
here reads them back, so a space goes out and comes back with the same memories, categories,
versions and dates.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import ValidationError
from .base import Builder, Part, from_iso, quoted
from .bundle import Bundle

EXTENSION = "memoryMcp"
GRAPH = ("entities", "relations")  # the members of the early whole-graph form
RELATION_CATEGORY = "relation"
UNCATEGORISED = "uncategorised"


# --- reading --------------------------------------------------------------------------------------


def parse(bundle: Bundle, builder: Builder) -> None:
    name = bundle.pick("memory.json") or bundle.pick("memory.jsonl")
    if name is None:
        raise ValidationError("file", "no memory.json in it: give the memory server's memory.json")
    for number, item in _objects(bundle, name, builder):
        kind = item.get("type")
        if kind == "relation" or (kind is None and "relationType" in item):
            _relation(item, number, builder)
        elif kind == "entity" or (kind is None and "observations" in item):
            _entity(item, number, builder)
        else:
            builder.skip(f"line {number}", "neither an entity nor a relation; not imported")


def _objects(bundle: Bundle, name: str, builder: Builder) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """The file's objects one at a time, numbered by line (by place in the early whole-graph form)."""
    if not bundle.json_lines(name):
        reader = bundle.json(name)
        if reader.peek() == "{":  # the early whole-graph form, or a file of one line
            number, one, graph = 0, {}, False
            for member in reader.members():
                if member in GRAPH and reader.peek() == "[":
                    graph = True
                    for item in reader.items():
                        number += 1
                        if isinstance(item, Mapping):
                            yield number, item
                else:
                    one[member] = reader.value()
            reader.end()
            if not graph:
                yield 1, one
            return
    for number, line in bundle.lines(name):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            builder.skip(
                f"line {number}", f"not valid JSON ({getattr(exc, 'msg', 'too deeply nested')}); not imported"
            )
            continue
        if isinstance(item, Mapping):
            yield number, item
        else:
            builder.skip(f"line {number}", "not a JSON object; not imported")


def _entity(item: Mapping[str, Any], number: int, builder: Builder) -> None:
    name, observations = item.get("name"), item.get("observations")
    if not isinstance(name, str) or not name.strip() or not isinstance(observations, list):
        builder.skip(f"line {number}", "an entity needs a name and a list of observations; not imported")
        return
    where = f"entity '{quoted(name)}' (line {number})"
    details = (
        item.get(EXTENSION, {}).get("observations") if isinstance(item.get(EXTENSION), Mapping) else None
    )
    if isinstance(details, list) and len(details) == len(observations):
        for index, (text, detail) in enumerate(zip(observations, details, strict=True), start=1):
            detail = detail if isinstance(detail, Mapping) else {}
            version = detail.get("version")
            builder.memory(
                [str(number), str(index)],
                text if isinstance(text, str) else "",
                f"{where}, observation {index}",
                category=builder.category(detail.get("category"), f"{where}, observation {index}"),
                created_at=from_iso(detail.get("createdAt")),
                updated_at=from_iso(detail.get("updatedAt")),
                version=version
                if isinstance(version, int) and not isinstance(version, bool) and version > 0
                else 1,
            )
        return
    category = builder.category(item.get("entityType"), where)
    parts = [
        Part(text=f"{name}: {text}", where=f"{where}, observation {index}", category=category)
        for index, text in enumerate(observations, start=1)
        if isinstance(text, str) and text.strip()
    ]
    builder.document([str(number), name], name, parts, where, category=category)


def _relation(item: Mapping[str, Any], number: int, builder: Builder) -> None:
    ends = [item.get("from"), item.get("relationType"), item.get("to")]
    if not all(isinstance(e, str) and e.strip() for e in ends):
        builder.skip(f"line {number}", "a relation needs from, relationType and to; not imported")
        return
    source, kind, target = (str(e).strip() for e in ends)
    builder.memory(
        [str(number)],
        f"{source} {kind.replace('_', ' ')} {target}",
        f"relation '{quoted(source, 30)} {kind} {quoted(target, 30)}' (line {number})",
        category=RELATION_CATEGORY,
    )


# --- writing --------------------------------------------------------------------------------------


def export_lines(records: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The live memories of ``export_records`` as memory.json lines, one entity per category."""
    groups: dict[str | None, list[Mapping[str, Any]]] = {}
    for r in records:
        if r["type"] == "memory" and r["status"] == "live":
            groups.setdefault(r["category"], []).append(r)
    for category in sorted(groups, key=lambda c: (c is None, c or "")):
        members = groups[category]
        entity = {
            "type": "entity",
            "name": category or UNCATEGORISED,
            "entityType": category or "memory",
            "observations": [r["content"] for r in members],
            EXTENSION: {
                "observations": [
                    {
                        "category": r["category"],
                        "version": r["version"],
                        "createdAt": r["createdAt"],
                        "updatedAt": r["updatedAt"],
                    }
                    for r in members
                ]
            },
        }
        yield json.dumps(entity, ensure_ascii=False, separators=(",", ":")) + "\n"
