"""The README's tool table lists every tool `tools/list` answers, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, apps_session

README = Path(__file__).parent.parent.parent / "README.md"


async def test_every_listed_tool_is_in_the_readme_table(server: RunningServer) -> None:
    await make_space(server.db, "team")
    await make_user(server.db, "reader-of-docs")
    key = await make_key(server.db, "reader-of-docs", {"team": "ReadWrite"}, default="team")
    async with apps_session(server, key) as s:  # a widget host: it is shown every tool
        listed = {t.name for t in (await s.client.list_tools()).tools}
    table = re.findall(r"^\| `([\w-]+)` \|", README.read_text(), re.MULTILINE)
    assert len(listed) == 15
    assert sorted(table) == sorted(listed)
