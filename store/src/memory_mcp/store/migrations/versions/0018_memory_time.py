"""What a memory is about in time: the span of the days its text mentions.

``happened_from`` and ``happened_to`` are written with the memory (``dates.memory_time``: "on 8 May,
2023", "yesterday" read from the text's own date or the day it was saved); both are NULL when the
text mentions no date, and search then takes the day it was saved. A search's time range and a
question's dates ("in May 2023") are compared with them (``search.search_memories``). Memories saved
before this revision have no span until they are saved again: they count by the day they were saved.

Revision ID: 0018
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE memories ADD COLUMN happened_from date, ADD COLUMN happened_to date")


def downgrade() -> None:
    op.execute("ALTER TABLE memories DROP COLUMN happened_from, DROP COLUMN happened_to")
