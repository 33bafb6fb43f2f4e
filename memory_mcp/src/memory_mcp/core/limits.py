"""The limits table of docs/security.md, written from the one source of each limit.

Limits live in ``store/validation.py`` (input shapes) and in the settings (their defaults, tunable
with ``MEMORY_MCP_*``). The docs quote them through this table only; a test checks that the table
in the docs is the one this module writes, so a changed limit cannot leave the docs behind.

    python -m memory_mcp.core.limits docs/security.md     # rewrite the table in place
"""

from __future__ import annotations

import sys

from memory_mcp.core.generated_section import replace_section, rewrite_files
from memory_mcp.core.settings import Settings
from memory_mcp.store import validation

BEGIN = "<!-- limits: written by python -m memory_mcp.core.limits; do not edit by hand -->"
END = "<!-- /limits -->"


def _n(value: int) -> str:
    return f"{value:,}"


def _mb(value: int) -> str:
    if value % 1_000_000 == 0:
        return f"{value / 1_000_000:g} MB"
    return f"{value / 2**30:g} GiB" if value % 2**30 == 0 else f"{value / 2**20:g} MiB"


def rows() -> list[tuple[str, str, str]]:
    """(what, limit, where it is set) for each limit a person may meet."""
    defaults = Settings.model_fields
    upload = int(defaults["max_upload_bytes"].default)
    body = int(defaults["max_body_bytes"].default)
    pdf_pages = int(defaults["max_pdf_pages"].default)
    media_seconds = float(defaults["max_media_seconds"].default)
    import_cpu = float(defaults["max_import_cpu_seconds"].default)
    import_memory = int(defaults["max_import_memory_bytes"].default)
    v = "validation"
    return [
        ("one memory's text", f"{_n(validation.MAX_CONTENT)} characters", f"{v}.MAX_CONTENT"),
        (
            "text saved at once (`add_memory`, REST): over one memory's length it becomes a document "
            "of several memories",
            f"{_n(validation.MAX_DOCUMENT_TEXT)} characters",
            f"{v}.MAX_DOCUMENT_TEXT",
        ),
        ("an uploaded file", f"{_mb(upload)}", "`MEMORY_MCP_MAX_UPLOAD_BYTES`"),
        (
            "text extracted from one file (and one imported document)",
            f"{_n(validation.MAX_EXTRACTED_TEXT)} characters",
            f"{v}.MAX_EXTRACTED_TEXT",
        ),
        (
            "pages of one uploaded PDF (a longer one fails before it is read)",
            _n(pdf_pages),
            "`MEMORY_MCP_MAX_PDF_PAGES`, or the Space's `spec.quotas.maxPdfPages`",
        ),
        (
            "length of one uploaded recording, audio or video",
            f"{media_seconds / 3600:g} hours",
            "`MEMORY_MCP_MAX_MEDIA_SECONDS`, or the Space's `spec.quotas.maxMediaSeconds`",
        ),
        ("a request body other than an upload or an import", f"{_mb(body)}", "`MEMORY_MCP_MAX_BODY_BYTES`"),
        (
            "an import read by `memory-mcp import` (all files of a folder or zip)",
            _mb(validation.MAX_IMPORT_BYTES),
            f"{v}.MAX_IMPORT_BYTES",
        ),
        (
            "an import sent to `POST /v1/spaces/{key}/import`",
            f"{_mb(upload)}",
            "`MEMORY_MCP_MAX_UPLOAD_BYTES`",
        ),
        (
            "CPU time reading one import may take (`memory-mcp import`, REST); past it nothing is imported",
            f"{import_cpu / 60:g} minutes",
            "`MEMORY_MCP_MAX_IMPORT_CPU_SECONDS`",
        ),
        (
            "what reading one import may hold (its records and the item being read); past it nothing "
            "is imported",
            _mb(import_memory),
            "`MEMORY_MCP_MAX_IMPORT_MEMORY_BYTES`",
        ),
        (
            "a zip member's size against its compressed size (members over 1 MiB)",
            f"{validation.MAX_ARCHIVE_RATIO} times",
            f"{v}.MAX_ARCHIVE_RATIO",
        ),
        ("members of one zip", _n(validation.MAX_ARCHIVE_MEMBERS), f"{v}.MAX_ARCHIVE_MEMBERS"),
        ("a search question", f"{_n(validation.MAX_QUERY)} characters", f"{v}.MAX_QUERY"),
        ("a literal keyword", f"{_n(validation.MAX_KEYWORD)} characters", f"{v}.MAX_KEYWORD"),
        ("a category", f"{validation.MAX_CATEGORY} characters", f"{v}.MAX_CATEGORY"),
        ("a space key", f"{validation.MAX_SPACE_KEY} characters", f"{v}.MAX_SPACE_KEY"),
        ("results per page or search", str(validation.MAX_LIMIT), f"{v}.MAX_LIMIT"),
        ("memories per page of the memory graph", str(validation.MAX_GRAPH_LIMIT), f"{v}.MAX_GRAPH_LIMIT"),
    ]


def table() -> str:
    lines = [BEGIN, "", "| limit of | at most | set in |", "|---|---|---|"]
    lines += [f"| {what} | {limit} | {where} |" for what, limit, where in rows()]
    return "\n".join([*lines, "", END])


def rewrite(text: str) -> str:
    """``text`` with its limits table replaced by the current one."""
    return replace_section(text, BEGIN, END, table(), "limits table")


if __name__ == "__main__":
    rewrite_files(sys.argv[1:], rewrite)
