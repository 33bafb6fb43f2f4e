"""ChatGPT's data export: ``conversations.json``, alone, in the export's folder or in its zip.

The file is a list of conversations. Each has a ``title``, ``create_time`` and ``update_time``
(seconds since 1970) and a ``mapping`` of message nodes linked by ``parent``/``children``: edits and
regenerations branch, and ``current_node`` is the leaf of the branch the user last saw, so that
branch, walked up to the root, is the conversation. A node's ``message`` has an ``author.role``
(``user``, ``assistant``, ``system``, ``tool``), a ``create_time`` and a ``content`` whose
``content_type`` says how to read it (``text`` and ``multimodal_text`` carry ``parts``).

Read here: the user's and the assistant's text messages on that branch. Left out: system and tool
messages, messages hidden from the conversation (custom instructions), the assistant's calls to its
tools (``recipient`` other than ``all``), and non-text parts (images, files, audio). How the
conversation is cut into a document and memories: :mod:`.conversations`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import ValidationError
from .base import Builder, from_epoch
from .bundle import Bundle
from .conversations import Turn, add_conversation

CATEGORY = "chatgpt"
TEXT_TYPES = ("text", "multimodal_text")


def parse(bundle: Bundle, builder: Builder) -> None:
    name = bundle.pick("conversations.json")
    if name is None:
        raise ValidationError(
            "file", "no conversations.json in it: give the export's zip, its folder or its conversations.json"
        )
    # Read a conversation at a time: what is held is the records so far and one conversation.
    items = bundle.json_list(name, "must be a list of conversations (ChatGPT's export format)")
    index = found = 0
    for index, conversation in enumerate(items, start=1):
        if not isinstance(conversation, Mapping) or not isinstance(conversation.get("mapping"), Mapping):
            builder.skip(f"conversation {index}", "not a conversation (no message mapping); not imported")
            continue
        found += 1
        key = str(conversation.get("conversation_id") or conversation.get("id") or index)
        title = conversation.get("title")
        add_conversation(
            builder,
            key=key,
            title=title if isinstance(title, str) else "",
            turns=list(_turns(conversation)),
            created_at=from_epoch(conversation.get("create_time")),
            updated_at=from_epoch(conversation.get("update_time")),
            assistant="ChatGPT",
            category=CATEGORY,
        )
    if index and not found:
        raise ValidationError(
            "file", f"{name} holds no ChatGPT conversations (a Claude export? --from claude)"
        )


def _branch(conversation: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The nodes of the branch that ends at ``current_node``, root first; without one, every node
    by time (an export of one unbranched conversation)."""
    mapping: Mapping[str, Any] = conversation["mapping"]
    chain: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    node_id = conversation.get("current_node")
    while isinstance(node_id, str) and node_id not in seen and isinstance(mapping.get(node_id), Mapping):
        seen.add(node_id)
        chain.append(mapping[node_id])
        node_id = mapping[node_id].get("parent")
    if chain:
        return chain[::-1]
    nodes = [n for n in mapping.values() if isinstance(n, Mapping) and isinstance(n.get("message"), Mapping)]
    return sorted(nodes, key=lambda n: _seconds(n["message"].get("create_time")))


def _seconds(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _text(content: object) -> str:
    if not isinstance(content, Mapping) or content.get("content_type") not in TEXT_TYPES:
        return ""
    parts = content.get("parts")
    if not isinstance(parts, list):
        return ""
    return "\n\n".join(p.strip() for p in parts if isinstance(p, str) and p.strip())


def _turns(conversation: Mapping[str, Any]) -> Iterator[Turn]:
    for node in _branch(conversation):
        message = node.get("message")
        if not isinstance(message, Mapping):
            continue
        author = message.get("author")
        role = author.get("role") if isinstance(author, Mapping) else None
        metadata = message.get("metadata")
        hidden = isinstance(metadata, Mapping) and metadata.get("is_visually_hidden_from_conversation")
        if role not in ("user", "assistant") or hidden or message.get("recipient", "all") != "all":
            continue
        text = _text(message.get("content"))
        if text:
            yield Turn(
                role, text, from_epoch(message.get("create_time")), from_epoch(message.get("update_time"))
            )
