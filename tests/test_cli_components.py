"""The command line in an image that holds only some components (the server's has no operator, the
operator's no embedder): its error messages must not need the missing ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Runs in a fresh interpreter where the named components cannot be imported, as in an image
# that does not install them.
SCRIPT = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None
from memory_mcp.cli_errors import explain
print(explain(RuntimeError("the disk is full")))
"""


@pytest.mark.parametrize(
    "blocked",
    [("memory_mcp.operator",), ("memory_mcp.embedder", "memory_mcp.operator", "memory_mcp.server")],
    ids=["server-image", "operator-image"],
)
def test_an_unexpected_error_is_one_line_without_other_components(blocked: tuple[str, ...]) -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(blocked=blocked)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert (
        run.stdout.strip()
        == "unexpected RuntimeError: the disk is full (run again with --debug for the traceback)"
    )
