"""A chat conversation as a document, shared by the ChatGPT and Claude importers.

How a conversation is cut (the contract of both formats):

- The conversation is one document, titled as it was, created and updated when it was. Its text is
  every turn in order, each under a heading naming the speaker (``## You``, ``## ChatGPT``), so
  ``getDocument`` reads like the chat did.
- The memories are what the user said: each of the user's turns is cut as an upload is (whole
  paragraphs packed up to about 1,200 characters, a longer paragraph at sentences), each piece a
  memory dated with its turn and pointing at its place in the document. A turn of fewer than
  :data:`~.base.MIN_STATEMENT_WORDS` words ("thanks", "go on") stays in the document only.
- The assistant's turns are context, not statements of the user: they stay in the document and
  make no memory.
- A turn that looks like it holds a credential is left out of both, and the report names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .base import MIN_STATEMENT_WORDS, Builder, Part, quoted


@dataclass(frozen=True)
class Turn:
    role: str  # "user", "assistant", or "attachment" (read in the document under its own heading)
    text: str
    created_at: datetime | None
    updated_at: datetime | None = None


def add_conversation(
    builder: Builder,
    *,
    key: str,
    title: str,
    turns: Sequence[Turn],
    created_at: datetime | None,
    updated_at: datetime | None,
    assistant: str,
    category: str,
) -> None:
    """One conversation's document and the memories of the user's turns."""
    where = f"conversation '{quoted(title)}' ({key})" if title else f"conversation {key}"
    created_at = created_at or next((t.created_at for t in turns if t.created_at), None)
    if not title:
        title = f"Untitled conversation of {created_at:%Y-%m-%d}" if created_at else "Untitled conversation"
    speakers = {"user": "You", "assistant": assistant}
    parts: list[Part] = []
    number = 0
    for turn in turns:
        # Messages are numbered as the chat showed them; an attachment goes with its message.
        number += turn.role in speakers
        label = assistant if turn.role == "assistant" else turn.role
        parts.append(
            Part(
                text=turn.text,
                where=f"{where}, message {number} ({label})",
                memories=turn.role == "user",
                heading=f"## {speakers[turn.role]}" if turn.role in speakers else None,
                created_at=turn.created_at,
                updated_at=turn.updated_at,
                min_words=MIN_STATEMENT_WORDS,
            )
        )
    builder.document(
        [key],
        title,
        parts,
        where,
        created_at=created_at,
        updated_at=updated_at,
        category=category,
    )
