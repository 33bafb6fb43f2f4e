"""Claude's data export: ``conversations.json`` and ``projects.json``, alone, in a folder or a zip.

``conversations.json`` is a list of conversations: ``uuid``, ``name``, ``created_at``,
``updated_at`` (ISO 8601) and ``chat_messages``, each with a ``sender`` (``human`` or
``assistant``), ``created_at``, the message as ``text`` and as ``content`` blocks (``type``
``text`` carries ``text``; tool calls and their results are other types), and ``attachments``
whose ``extracted_content`` is the text of a file the user attached.

``projects.json`` is a list of projects: ``uuid``, ``name``, ``description``, ``prompt_template``
(the project's instructions), ``created_at`` and ``docs`` (the project's knowledge: ``uuid``,
``filename``, ``content``, ``created_at``).

What becomes what: a conversation as :mod:`.conversations` cuts it (attachments are read as part of
the user's turn in the document, not as memories); a project's description and instructions are a
document whose text is the user's own, so it makes memories; each project document is a document
of its own, cut into memories as an uploaded file is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import chain
from typing import Any

from ..errors import ValidationError
from .base import Builder, Part, from_iso, quoted
from .bundle import Bundle
from .conversations import Turn, add_conversation

CATEGORY = "claude"


def parse(bundle: Bundle, builder: Builder) -> None:
    if bundle.archive is None and not bundle.path.is_dir():  # one file: which one by its first item
        items = _list(bundle, bundle.path.name)
        first = next(items, None)
        if first is not None:
            (_projects if _is_project(first) else _conversations)(chain([first], items), builder)
        return
    found = [
        (name, read)
        for name, read in (
            (bundle.find("conversations.json"), _conversations),
            (bundle.find("projects.json"), _projects),
        )
        if name
    ]
    if not found:
        raise ValidationError(
            "file",
            "no conversations.json or projects.json in it: give the export's zip, its folder or one file",
        )
    for name, read in found:
        read(_list(bundle, name), builder)


def _list(bundle: Bundle, name: str) -> Iterator[Any]:
    """The file's items, read one at a time."""
    return bundle.json_list(name, "must be a list (Claude's export format)")


def _is_project(item: object) -> bool:
    return isinstance(item, Mapping) and ("docs" in item or "prompt_template" in item)


def _message_text(message: Mapping[str, Any]) -> str:
    blocks = message.get("content")
    if isinstance(blocks, list):
        texts = [
            b["text"].strip()
            for b in blocks
            if isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        if any(texts):
            return "\n\n".join(t for t in texts if t)
    text = message.get("text")
    return text.strip() if isinstance(text, str) else ""


def _turns(messages: object) -> Iterator[tuple[Turn, list[tuple[str, str]]]]:
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, Mapping) or message.get("sender") not in ("human", "assistant"):
            continue
        attachments = [
            (str(a.get("file_name") or "attachment"), a["extracted_content"])
            for a in message.get("attachments") or []
            if isinstance(a, Mapping) and isinstance(a.get("extracted_content"), str)
        ]
        turn = Turn(
            "user" if message["sender"] == "human" else "assistant",
            _message_text(message),
            from_iso(message.get("created_at")),
            from_iso(message.get("updated_at")),
        )
        yield turn, attachments


def _conversations(items: Iterable[Any], builder: Builder) -> None:
    index = found = 0
    for index, conversation in enumerate(items, start=1):
        if not isinstance(conversation, Mapping) or not isinstance(conversation.get("chat_messages"), list):
            builder.skip(f"conversation {index}", "not a conversation (no chat_messages); not imported")
            continue
        found += 1
        key = str(conversation.get("uuid") or index)
        turns: list[Turn] = []
        for turn, attachments in _turns(conversation["chat_messages"]):
            # An attachment is read in the document after the turn it came with, never as a memory.
            turns.append(turn)
            turns += [
                Turn("attachment", f"### Attachment: {n}\n\n{t}", turn.created_at) for n, t in attachments
            ]
        name = conversation.get("name")
        add_conversation(
            builder,
            key=key,
            title=name if isinstance(name, str) else "",
            turns=turns,
            created_at=from_iso(conversation.get("created_at")),
            updated_at=from_iso(conversation.get("updated_at")),
            assistant="Claude",
            category=CATEGORY,
        )
    if index and not found:
        raise ValidationError("file", "it holds no Claude conversations (a ChatGPT export? --from chatgpt)")


def _projects(items: Iterable[Any], builder: Builder) -> None:
    for index, project in enumerate(items, start=1):
        if not isinstance(project, Mapping):
            builder.skip(f"project {index}", "not a project; not imported")
            continue
        key = str(project.get("uuid") or index)
        given = project.get("name")
        name = given if isinstance(given, str) and given.strip() else f"project {index}"
        where = f"project '{quoted(name)}' ({key})"
        created = from_iso(project.get("created_at"))
        updated = from_iso(project.get("updated_at"))
        parts = [
            Part(text=value, where=f"{where}, {label.lower()}", heading=f"## {label}", created_at=created)
            for label, value in (
                ("Description", project.get("description")),
                ("Instructions", project.get("prompt_template")),
            )
            if isinstance(value, str) and value.strip()
        ]
        if parts:
            builder.document(
                ["project", key],
                f"Project: {name}",
                parts,
                where,
                created_at=created,
                updated_at=updated,
                category=CATEGORY,
            )
        for number, doc in enumerate(project.get("docs") or [], start=1):
            if not isinstance(doc, Mapping) or not isinstance(doc.get("content"), str):
                builder.skip(f"{where}, document {number}", "not a document with content; not imported")
                continue
            file_name = doc.get("filename") if isinstance(doc.get("filename"), str) else None
            doc_where = f"{where}, document '{quoted(file_name or str(number))}'"
            builder.document(
                ["project", key, str(doc.get("uuid") or number)],
                file_name,
                [
                    Part(
                        text=doc["content"],
                        where=doc_where,
                        created_at=from_iso(doc.get("created_at")) or created,
                    )
                ],
                doc_where,
                created_at=from_iso(doc.get("created_at")) or created,
                category=CATEGORY,
                file_name=file_name,
            )
