"""Settings read from the environment as an operator writes them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memory_mcp.core.settings import Settings


def test_log_level_and_format_take_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_MCP_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("MEMORY_MCP_LOG_FORMAT", "Json")
    settings = Settings()
    assert (settings.log_level, settings.log_format) == ("debug", "json")


def test_an_unknown_log_level_is_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_MCP_LOG_LEVEL", "VERBOSE")
    with pytest.raises(ValidationError, match="log_level"):
        Settings()
