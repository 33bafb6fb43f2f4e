"""Human-readable text for every result: what the model reads beside the structured content."""

from __future__ import annotations

from .schemas import (
    PROVENANCE_NOTICE,
    AddOut,
    DocumentDetailOut,
    DocumentsOut,
    MemoriesOut,
    MemoryOut,
    ProfileOut,
    SearchOut,
    SelectSpaceOut,
    SpacesOut,
    WhoAmIOut,
)


def _quote(text: str) -> str:
    """Indent memory text as a quotation so it reads as data, not as part of the answer."""
    return "\n".join("    > " + line for line in text.splitlines() or [""])


def _memory(m: MemoryOut, extra: str = "") -> str:
    meta = f"[{m.id}] v{m.version}"
    if m.category:
        meta += f" #{m.category}"
    if m.forgotten:
        meta += " (forgotten)"
    elif not m.isLatest:
        meta += " (superseded)"
    who = m.createdBy or "unknown"
    if m.updatedBy and m.updatedBy != m.createdBy:
        who += f", updated by {m.updatedBy}"
    return f"- {meta}{extra} by {who}, {m.createdAt:%Y-%m-%d}\n{_quote(m.content)}"


def profile(p: ProfileOut) -> str:
    lines = [f"Profile of space '{p.space}' ({p.tokens} tokens)."]
    if p.stable:
        lines.append("Stable facts:")
        lines += [_memory(m) for m in p.stable]
    if p.recent:
        lines.append("Recent:")
        lines += [_memory(m) for m in p.recent]
    if not p.stable and not p.recent:
        lines.append("No memories yet.")
    return "\n".join(lines)


def search(r: SearchOut) -> str:
    lines = [PROVENANCE_NOTICE]
    if r.fallback:
        lines.append(f"Note: {r.fallback}")
    if r.profile is not None:
        lines.append(profile(r.profile))
    lines.append(f"{r.count} matching memor{'y' if r.count == 1 else 'ies'} in space '{r.space}':")
    for h in r.results:
        lines.append(_memory(h, f" score {h.score:.4f} ({'+'.join(h.matchedModes)})"))
    return "\n".join(lines)


def add(r: AddOut) -> str:
    lines = [r.message]
    if r.memory is not None:
        lines.append(_memory(r.memory))
    if r.superseded is not None:
        lines.append("Previous version (kept as history):")
        lines.append(_memory(r.superseded))
    if r.candidates:
        lines.append("Candidates (nothing was forgotten; repeat with the exact text or the id):")
        lines += [_memory(m) for m in r.candidates]
    return "\n".join(lines)


def documents(r: DocumentsOut) -> str:
    p = r.pagination
    lines = [f"Documents in space '{r.space}' (page {p.page}, {len(r.documents)} of {p.total}):"]
    for d in r.documents:
        lines.append(
            f"- [{d.id}] {d.title} ({d.type}, {d.status}, {d.createdAt:%Y-%m-%d})\n{_quote(d.summary)}"
        )
    if p.hasMore:
        lines.append(f"More on page {p.page + 1}.")
    return "\n".join(lines)


def document(d: DocumentDetailOut) -> str:
    return (
        f"{PROVENANCE_NOTICE}\nDocument [{d.id}] '{d.title}' in space '{d.space}' ({d.type}, {d.status}, "
        f"{d.size} bytes), created by {d.createdBy or 'unknown'} on {d.createdAt:%Y-%m-%d}.\n"
        f"Summary:\n{_quote(d.summary)}\nContent:\n{_quote(d.content)}\n"
        f"Memories: {', '.join(d.memoryIds) or 'none'}"
    )


def memories(r: MemoriesOut) -> str:
    p = r.pagination
    lines = [
        PROVENANCE_NOTICE,
        f"Memories in space '{r.space}' (page {p.page}, {len(r.memories)} of {p.total}):",
    ]
    for m in r.memories:
        lines.append(_memory(m, f" doc {m.documentId}"))
    if p.hasMore:
        lines.append(f"More on page {p.page + 1}.")
    return "\n".join(lines)


def spaces(r: SpacesOut) -> str:
    lines = [f"{r.count} accessible space{'s' if r.count != 1 else ''}:"]
    for s in r.spaces:
        active = " (active)" if s.active else ""
        last = f", last activity {s.lastActivity:%Y-%m-%d %H:%M}" if s.lastActivity else ""
        lines.append(
            f"- {s.name} — key '{s.key}'{active}: {s.access}, {s.memoryCount} memories, "
            f"{s.documentCount} documents{last}"
        )
    return "\n".join(lines)


def who_am_i(r: WhoAmIOut) -> str:
    grants = ", ".join(f"{g.space}: {g.effective}" for g in r.grants) or "none"
    return (
        f"{r.user.displayName} <{r.user.email}> (id {r.user.id}), role {r.user.role}.\n"
        f"Key '{r.key.name}' (prefix {r.key.prefix}). Access: {grants}.\n"
        f"Active space: {r.activeSpace or 'none selected'}."
    )


def selected(r: SelectSpaceOut) -> str:
    return r.message
