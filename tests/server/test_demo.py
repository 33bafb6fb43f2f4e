"""`memory-mcp demo` as a directory's reviewer meets it: a real process makes the space and prints
a key, and that key reads the sample memories through the real MCP client and writes nothing."""

from __future__ import annotations

from memory_mcp.demo_command import SAMPLES, USER
from tests.cli_support import Admin
from tests.server.conftest import RunningServer, mcp_session


async def test_demo_makes_a_space_of_samples_and_a_reader_key_that_reads_them_and_cannot_write(
    server: RunningServer, db_urls: tuple[str, str]
) -> None:
    admin = Admin(db_urls[1])
    first = admin.ok("demo", "--space", "review-demo")
    key = first.stdout.strip().splitlines()[-1]
    assert key.startswith("mmk_")
    assert f"{len(SAMPLES)} sample memories added" in " ".join(first.stderr.split() + first.stdout.split())

    async with mcp_session(server, key) as s:
        me = await s.ok("whoAmI")
        assert me["user"]["role"] == "Reader"
        assert [(g["space"], g["effective"]) for g in me["grants"]] == [("review-demo", "Read")]
        listed = await s.ok("listMemories", limit=50)
        assert sorted(m["content"] for m in listed["memories"]) == sorted(c for c, _ in SAMPLES)
        found = await s.ok("search_memory", keyword="PAY-4021", includeProfile=False)
        assert [r["content"] for r in found["results"]] == [next(c for c, _ in SAMPLES if "PAY-4021" in c)]
        refused = await s.error("add_memory", content="A reviewer tries to write.")
        assert "review-demo" in refused or "read" in refused.lower()
        assert len((await s.ok("listMemories", limit=50))["memories"]) == len(SAMPLES)

    # Again: nothing twice, and a second key beside the first, which still works.
    second = admin.ok("demo", "--space", "review-demo")
    assert "0 sample memories added" in " ".join(second.stderr.split() + second.stdout.split())
    other = second.stdout.strip().splitlines()[-1]
    assert other.startswith("mmk_") and other != key
    users = {u["name"]: u for u in admin.listing("user")}
    assert users[USER]["role"] == "Reader"
    for each in (key, other):
        async with mcp_session(server, each) as s:
            assert len((await s.ok("listMemories", limit=50))["memories"]) == len(SAMPLES)
